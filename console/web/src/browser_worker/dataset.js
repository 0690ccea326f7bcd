// A task's dataset in the browser: what compute/worker/data.py's `obtain_dataset` gives a native worker, from
// the network only, as the arrays compute/wasm/trainer.py hands the kernel.
//
//   const urls = datasetUrls(spec, taskAnswer);   // the spec's URLs, then the members' (chain's /market/task/<id>)
//   const data = await loadDataset(spec, {fetch, dataKey, urls});
//   data.trainInputs   // Float32Array (trainCount x inputSize), data.trainTargets: Int32Array (trainCount)
//
// `spec` is the task's spec document (its JSON parsed). A tab holds no blob store and cannot build a bundled
// dataset (Python's `_build_locally` reads scikit-learn's files), so it always fetches: the manifest by the spec's
// `manifest_hash`, then every shard, from the spec's `dataset.urls` and then `urls` (the task's members' blob
// services, `datasetUrls` after compute/data/fetch.py: a member keeps and serves the data it trains on). Each blob is
// hash-checked as it arrives (`blob_fetch.js`); the manifest's structure and its shards and bytes are checked
// against what the spec declared before a shard is fetched; each shard's size and sample count against its
// entry; a private manifest's shards are opened with the task's data key (secretbox, as compute/data/
// encryption.py seals them); every shard is decoded as canonical tensor bytes. The splits are then the float32
// features and integer classes Python's `split_tensors` makes of them, in shard order, checked as the kernel's
// `set_data` checks its data. The wasm32 kernel trains an MLP on classification features only, so any other kind
// of dataset is refused here.

import { baseUrls, fetchBlob } from "./blob_fetch.js";
import { decodeTensors } from "./canonical.js";
import { DataKeyError, DatasetError } from "./data_errors.js";
import { SPLITS, checkManifestBounds, isPrivate, parseManifest } from "./manifest.js";
import { decryptShard } from "./shard_cipher.js";
import { sodiumReady } from "./sodium.js";

/** What a spec's dataset section may omit (chain/market/spec.py DEFAULT_DATASET_MAX_SHARDS and _BYTES). */
const DEFAULT_MAX_SHARDS = 1024;
const DEFAULT_MAX_BYTES = 2 ** 30;
/** The most bytes a manifest may take (compute/blobs/store.py DEFAULT_MAX_BLOB_SIZE). */
const MAX_MANIFEST_BYTES = 256 * 1024 * 1024;
const PACKED = "packed";

/** The key a checked manifest's shards open with: null for a public dataset; the data key for a private one. */
function shardKey(manifest, dataKey) {
  if (!isPrivate(manifest)) return null;
  if (dataKey == null) {
    throw new DataKeyError("the dataset is private and its data key has not been delivered to this member yet");
  }
  if (!(dataKey instanceof Uint8Array) || dataKey.length !== 32) throw new DataKeyError("a data key is 32 bytes");
  return dataKey;
}

/** Refuse a packed dataset whose manifest disagrees with the shape its spec declared on chain (Python's
 * `check_declared_shape`): the chain bounded the model by the declared shape. */
function checkDeclaredShape(dataset, manifest) {
  if (dataset.name !== PACKED) return;
  const kind = dataset.context ? "text-classification" : (dataset.task ?? "classification");
  const declared = [kind, dataset.input_size, dataset.num_classes, dataset.context ?? 0];
  const found = [manifest.kind, manifest.input_size, manifest.num_classes, manifest.context];
  if (declared.some((value, i) => value !== found[i])) {
    throw new DatasetError(`dataset ${dataset.manifest_hash.slice(0, 12)} is ${found[0]} with ${found[1]} inputs, `
      + `${found[2]} classes and context ${found[3]}, the spec declares ${declared[0]} with ${declared[1]}, `
      + `${declared[2]} and ${declared[3]}`);
  }
}

/** One shard's tensors, checked against its manifest entry (size, decryption, decoding, sample count). */
function openShard(bytes, entry, key, sodium) {
  if (bytes.length !== entry.size) {
    throw new DatasetError(`shard ${entry.hash} has ${bytes.length} bytes, manifest says ${entry.size}`);
  }
  const plain = key === null ? bytes : decryptShard(sodium, key, bytes);
  let tensors;
  try {
    tensors = decodeTensors(plain);
  } catch (error) {
    throw new DatasetError(`shard ${entry.hash} does not decode: ${error.message}`);
  }
  const first = tensors.values().next().value;
  const count = first?.shape.length ? first.shape[0] : null;
  if (count !== entry.samples) {
    throw new DatasetError(`shard ${entry.hash} has ${count} samples, manifest says ${entry.samples}`);
  }
  return tensors;
}

/** The float32 features of one shard, as torch's `.float()` makes them (float64 rounded to nearest). */
function features(tensors, entry, inputSize) {
  const inputs = tensors.get("inputs");
  if (!inputs || inputs.shape.length !== 2 || inputs.shape[1] !== inputSize) {
    throw new DatasetError(`shard ${entry.hash} has no inputs of ${inputSize} features per sample`);
  }
  if (inputs.dtype === "float32") return inputs.data;
  if (inputs.dtype === "float64") return Float32Array.from(inputs.data);
  throw new DatasetError(`shard ${entry.hash} holds ${inputs.dtype} inputs: a browser worker reads float32 features`);
}

/** The classes of one shard, each within the model's `numClasses` (the kernel refuses any other). */
function classes(tensors, entry, numClasses) {
  const targets = tensors.get("targets");
  if (!targets || targets.shape.length !== 1 || !["int64", "int32", "uint8", "int8"].includes(targets.dtype)) {
    throw new DatasetError(`shard ${entry.hash} has no integer targets, one per sample`);
  }
  const out = new Int32Array(targets.shape[0]);
  for (let i = 0; i < out.length; i++) {
    const target = targets.data[i];
    if (target < 0 || target >= numClasses) {
      throw new DatasetError(`shard ${entry.hash} has the target ${target}, outside the model's ${numClasses} classes`);
    }
    out[i] = Number(target);
  }
  return out;
}

async function loadSplit(split, manifest, context) {
  const listing = manifest.splits[split];
  const inputSize = manifest.input_size;
  const listed = listing.shards.reduce((total, entry) => total + entry.samples, 0);
  if (listed !== listing.samples) {
    throw new DatasetError(`split ${split} has ${listed} samples, manifest says ${listing.samples}`);
  }
  const shardBytes = listing.shards.reduce((total, entry) => total + entry.size, 0);
  if (listing.samples * inputSize * 4 > shardBytes) { // checked before the arrays are allocated
    throw new DatasetError(`split ${split} lists ${listing.samples} samples of ${inputSize} features in ${shardBytes} `
      + `bytes of shards, fewer than their float32 features take`);
  }
  const inputs = new Float32Array(listing.samples * inputSize);
  const targets = new Int32Array(listing.samples);
  let count = 0;
  for (const entry of listing.shards) {
    let bytes;
    try {
      bytes = await fetchBlob(context.urls, entry.hash, { fetch: context.fetch, maxSize: entry.size });
    } catch (error) {
      throw error instanceof DatasetError ? new DatasetError(`shard of the ${split} split: ${error.message}`) : error;
    }
    const tensors = openShard(bytes, entry, context.key, context.sodium);
    inputs.set(features(tensors, entry, inputSize), count * inputSize);
    targets.set(classes(tensors, entry, manifest.num_classes), count);
    count += entry.samples;
  }
  return { inputs, targets, count };
}

/** Where a task's dataset is served, as compute/data/fetch.py's `dataset_urls`: the spec's URLs, then each
 * member's blob service (its relay's place for it when a relay serves it), active and finished members first.
 * `task` is the chain's answer at /market/task/<id>; pass the result as `loadDataset`'s `urls`. */
export function datasetUrls(spec, task) {
  const serving = (member) => (member.status === "active" || member.status === "finished" ? 0 : 1);
  const members = [...(task?.members ?? [])].sort((a, b) => serving(a) - serving(b));
  const fetchUrl = (member) => (member.relay ? `${member.relay.replace(/\/+$/, "")}/workers/${member.worker}`
    : member.blob_url);
  return baseUrls([...(spec.dataset.urls ?? []), ...members.map(fetchUrl)]);
}

/** The task's dataset (module comment): `{trainInputs, trainTargets, trainCount, testInputs, testTargets,
 * testCount, inputSize, numClasses, name, manifestHash}`; DatasetError (DataKeyError for a private dataset
 * without its key, or one its shards do not open with) when it cannot be had as the task declared it. */
export async function loadDataset(spec, { fetch = globalThis.fetch, dataKey = null, urls = [] } = {}) {
  const dataset = spec.dataset;
  const sources = [...(dataset.urls ?? []), ...urls];
  const manifestHash = dataset.manifest_hash;
  let manifestBytes;
  try {
    manifestBytes = await fetchBlob(sources, manifestHash, { fetch, maxSize: MAX_MANIFEST_BYTES });
  } catch (error) {
    throw error instanceof DatasetError ? new DatasetError(`the dataset's manifest: ${error.message}`) : error;
  }
  const manifest = parseManifest(manifestBytes);
  checkManifestBounds(manifest, dataset.max_shards ?? DEFAULT_MAX_SHARDS, dataset.max_bytes ?? DEFAULT_MAX_BYTES);
  if (manifest.kind !== "classification") {
    throw new DatasetError(`the wasm32 kernel trains on classification features, not on ${manifest.kind} data`);
  }
  if (manifest.input_size < 1 || manifest.num_classes < 1) {
    throw new DatasetError(`the manifest declares ${manifest.input_size} inputs and ${manifest.num_classes} classes`);
  }
  checkDeclaredShape(dataset, manifest);
  const key = shardKey(manifest, dataKey);
  const sodium = key === null ? null : await sodiumReady();
  const context = { urls: sources, fetch, key, sodium };
  const splits = {};
  for (const split of SPLITS) splits[split] = await loadSplit(split, manifest, context);
  return {
    trainInputs: splits.train.inputs, trainTargets: splits.train.targets, trainCount: splits.train.count,
    testInputs: splits.test.inputs, testTargets: splits.test.targets, testCount: splits.test.count,
    inputSize: manifest.input_size, numClasses: manifest.num_classes, name: String(manifest.name),
    manifestHash,
  };
}
