// A dataset's manifest read as compute/data/manifest.py's `parse_manifest` reads it: the JSON whose sha256 is the
// spec's `manifest_hash`, listing each split's content-addressed shards (hash, size, samples), with the checks
// Python makes before a shard is fetched: its structure, and the shards and bytes it lists against what the spec
// declared (`check_manifest_bounds`), so that nothing beyond them is fetched or held.

import { DatasetError } from "./data_errors.js";

export const SPLITS = ["train", "test"];
const KINDS = ["classification", "regression", "text", "text-classification"];
/** The cipher a private dataset's manifest names (compute/data/encryption.py): libsodium's secretbox. */
export const CIPHER = "xsalsa20poly1305";

const isCount = (value) => Number.isInteger(value);
const isHash = (value) => typeof value === "string" && value.length === 64;

function checkSplit(split, listing) {
  const shards = listing?.shards;
  if (!Array.isArray(shards) || !shards.length) throw new DatasetError(`manifest split ${split} lists no shards`);
  for (const entry of shards) {
    const ok = entry && typeof entry === "object" && isHash(entry.hash)
      && ["size", "samples"].every((key) => isCount(entry[key]) && entry[key] > 0);
    if (!ok) throw new DatasetError(`malformed shard entry in split ${split}: ${JSON.stringify(entry)}`);
  }
  if (!isCount(listing.samples)) throw new DatasetError(`manifest split ${split} has no sample count`);
}

/** The manifest in `bytes` (already hash-checked), its structure checked; DatasetError otherwise. */
export function parseManifest(bytes) {
  let manifest;
  try {
    manifest = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch (error) {
    throw new DatasetError(`manifest is not JSON: ${error.message}`);
  }
  if (!manifest || typeof manifest !== "object" || manifest.version !== 1) {
    throw new DatasetError("manifest has no supported version");
  }
  if (!KINDS.includes(manifest.kind)) throw new DatasetError(`unknown dataset kind ${JSON.stringify(manifest.kind)}`);
  const splits = manifest.splits;
  if (!splits || typeof splits !== "object" || Object.keys(splits).sort().join() !== "test,train") {
    throw new DatasetError("manifest must have exactly the splits train and test");
  }
  for (const split of SPLITS) checkSplit(split, splits[split]);
  for (const key of ["input_size", "num_classes", "context"]) {
    if (!isCount(manifest[key]) || manifest[key] < 0) {
      throw new DatasetError(`manifest field ${key} must be a non-negative integer`);
    }
  }
  const preprocessing = manifest.preprocessing ?? { hash: "0".repeat(64), size: 1 };
  if (!(isHash(preprocessing.hash) && isCount(preprocessing.size) && preprocessing.size > 0)) {
    throw new DatasetError(`malformed preprocessing entry: ${JSON.stringify(preprocessing)}`);
  }
  if ("cipher" in manifest && manifest.cipher !== CIPHER) {
    throw new DatasetError(`manifest cipher ${JSON.stringify(manifest.cipher)} is not ${CIPHER}`);
  }
  return manifest;
}

/** Whether a checked manifest's shards are encrypted under a data key. */
export function isPrivate(manifest) {
  return "cipher" in manifest;
}

/** Refuse a manifest listing more shards or bytes than the spec declared (`max_shards`, `max_bytes`). */
export function checkManifestBounds(manifest, maxShards, maxBytes) {
  const entries = SPLITS.flatMap((split) => manifest.splits[split].shards);
  const size = entries.reduce((total, entry) => total + entry.size, 0);
  if (entries.length > maxShards) {
    throw new DatasetError(`the manifest lists ${entries.length} shards, the spec allows ${maxShards}`);
  }
  if (size > maxBytes) throw new DatasetError(`the manifest lists ${size} bytes of shards, the spec allows ${maxBytes}`);
}
