// The binary Merkle tree over a round's checkpoint hashes (compute/checkpoint_merkle.py, docs/protocol.md
// section 2): leaf = sha256(0x00 || checkpoint_hash), node = sha256(0x01 || left || right), an odd last node of
// a level carried up unchanged. Its root is the `checkpoint_root` a worker commits.
//
//   checkpointRoot(["ab12...", ...])   // hex, 64 digits

import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";

function fromHex(hex) {
  if (typeof hex !== "string" || !/^[0-9a-f]{64}$/.test(hex)) {
    throw new Error("every leaf must be a 32-byte hash (64 lower-case hex digits)");
  }
  return Uint8Array.from(hex.match(/../g), (pair) => parseInt(pair, 16));
}

function tagged(tag, ...parts) {
  const bytes = new Uint8Array(1 + parts.reduce((total, part) => total + part.length, 0));
  bytes[0] = tag;
  let at = 1;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.length;
  }
  return sha256(bytes);
}

/** The root (hex) over checkpoint hashes (hex), in checkpoint order. */
export function checkpointRoot(hexHashes) {
  if (!hexHashes.length) throw new Error("a Merkle tree needs at least one leaf");
  let level = hexHashes.map((hex) => tagged(0x00, fromHex(hex)));
  while (level.length > 1) {
    const parents = [];
    for (let i = 0; i + 1 < level.length; i += 2) parents.push(tagged(0x01, level[i], level[i + 1]));
    if (level.length % 2) parents.push(level[level.length - 1]);
    level = parents;
  }
  return toHex(level[0]);
}
