// TEST SWITCH ONLY: the bytes and numbers a cheating tab forges around an honestly trained round, twin by twin of
// compute/cheats/builtin.py's (cheats.js names them; round_publication.js applies them): an altered update,
// hostile checkpoints and update that only decoding exposes, a forged final weights hash, and start weights of
// the cheater's own choosing. Each forgery is a pure function of its input, the same bytes as Python's where
// Python's are a function of their input too (every one here but the start weights' noise, which is the tab's
// own stream: cheat_segments.js `noise`).

import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";
import { ByteWriter, utf8 } from "./bytes.js";
import { noise } from "./cheat_segments.js";

const TRLT = utf8("TRLT");
const ENTRY = utf8("weights/layers.0.weight");

/** forged_update: the honest update with its payload's last byte flipped (still well framed). */
export function alteredUpdate(bytes) {
  const altered = bytes.slice();
  altered[altered.length - 1] ^= 0x01;
  return altered;
}

/** garbage_blobs: hostile canonical bytes in place of checkpoint `index`, a different kind per index (2^31
 * floats with no data, a zero dimension, a forged tensor count, a wrong shape, not a checkpoint at all). */
export function garbageCheckpoint(index) {
  const head = () => new ByteWriter().bytes(TRLT).u8(1).u32(1).u16(ENTRY.length).bytes(ENTRY);
  const kinds = [
    () => head().u8(1).u8(1).u64(2 ** 31),
    () => head().u8(1).u8(2).u64(0).u64(7),
    () => new ByteWriter().bytes(TRLT).u8(1).u32(2 ** 32 - 1),
    () => head().u8(1).u8(1).u64(3).bytes(new Uint8Array(12)),
    () => new ByteWriter().bytes(utf8("not a checkpoint at all ")).u8(index % 256),
  ];
  return kinds[index % kinds.length]().finish();
}

/** garbage_blobs: a well-framed update header announcing 2^31 values, with no payload. */
export function garbageUpdate() {
  const codec = utf8("fp32");
  return new ByteWriter().bytes(utf8("TRCU")).u8(1).u8(codec.length).bytes(codec).u32(1).u16(1).bytes(utf8("x"))
    .u8(1).u64(2 ** 31).finish();
}

/** forged_final: the final weights hash a forger reports for the true one (hex): sha256 of
 * "trolly/forged-final/" and the true hash's bytes, any hash but the true one. */
export function forgedFinalHash(trueHex) {
  const prefix = utf8("trolly/forged-final/");
  const bytes = new Uint8Array(prefix.length + 32);
  bytes.set(prefix);
  bytes.set(trueHex.match(/../g).map((pair) => parseInt(pair, 16)), prefix.length);
  return toHex(sha256(bytes));
}

/** arbitrary_start: the round's start nudged by noise of an update's size (the spec's lr), tensor by tensor;
 * `weights` a Map name -> {dtype, shape, data} as the follower gives it. */
export function chosenStart(weights, lr, workerIndex, roundIndex) {
  const draw = noise(1000 * roundIndex + workerIndex, -1);
  const chosen = new Map();
  for (const [name, tensor] of weights) {
    const data = tensor.data.map((value) => Math.fround(value + Math.fround(lr * draw())));
    chosen.set(name, { ...tensor, data });
  }
  return chosen;
}
