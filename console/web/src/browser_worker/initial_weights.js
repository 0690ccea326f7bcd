// W_0 of a task that allows the wasm32 kernel, to the bit what compute/portable_weights.py computes (and so what
// `compute.training.initial_weights` gives every worker, verifier and follower of such a task): integer
// arithmetic on a counter-based stream and two correctly rounded float32 operations, so no RNG of torch's is
// needed (docs/browser-worker.md, "W_0").
//
//   const weights = initialWeights(spec, { inputSize: 64, numClasses: 10 });   // Map name -> {dtype, shape, data}
//
// The 64-bit integers are BigInts (a seed may pass 2^53).

const MASK = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;
const INIT_DOMAIN = 0x74726f6c6c796931n; // "trollyi1"
const DEFAULT_HIDDEN = [1024, 1024]; // compute/models/mlp.py's MLPConfig.hidden

/** splitmix64's finalizer modulo 2^64 (the kernel's mix64). */
export function mix64(z) {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

function tensorKey(seed, tensorIndex) {
  const key = mix64(((INIT_DOMAIN ^ seed) + GOLDEN) & MASK);
  return mix64(((key ^ BigInt(tensorIndex)) + GOLDEN) & MASK);
}

/** Tensor `tensorIndex` of W_0: `count` float32 values uniform in (-1/sqrt(fanIn), 1/sqrt(fanIn)). */
export function uniformTensor(seed, tensorIndex, count, fanIn) {
  const key = tensorKey(BigInt(seed), tensorIndex);
  const bound = Math.fround(1 / Math.fround(Math.sqrt(fanIn))); // each rounding is float32's correct one
  const values = new Float32Array(count);
  let counter = key;
  for (let i = 0; i < count; i++) {
    counter = (counter + GOLDEN) & MASK; // key + (i + 1) * GOLDEN
    const top = Number(mix64(counter) >> 40n);
    values[i] = (2 * top + 1 - 0x1000000) * 2 ** -24 * bound; // exact in double, rounded once on the store
  }
  return values;
}

/** The spec's `training.seed` exactly, from the spec's JSON text: `JSON.parse` rounds a number past 2^53 (a seed
 * may be up to 2^63 - 1), so the digits are read from the text (the schema names one "seed"). */
export function exactSeed(specText) {
  const found = [...specText.matchAll(/"seed"\s*:\s*(-?\d+)/g)];
  if (found.length !== 1) throw new Error(`the spec names ${found.length} seeds, not one`);
  return BigInt(found[0][1]);
}

function seedOf(spec) {
  const seed = spec.training.seed;
  if (typeof seed === "number" && !Number.isSafeInteger(seed)) {
    throw new Error("training.seed is past 2^53 as a JSON number: pass the spec with exactSeed(specText) as its seed");
  }
  return BigInt(seed);
}

/** The MLP's layer sizes (inputs, ...hidden, classes) of a spec (its JSON document) on data of `shape`. */
export function mlpSizes(spec, shape) {
  if (spec.model.arch !== "mlp") throw new Error(`the wasm32 kernel trains an mlp, not a ${spec.model.arch}`);
  const hidden = (spec.model.config || {}).hidden || DEFAULT_HIDDEN;
  return [shape.inputSize, ...hidden, shape.numClasses];
}

/** W_0 of `spec` (its JSON document, allowing wasm32) for data of `shape` ({inputSize, numClasses}): a Map in the
 * state_dict's order, name -> {dtype: "float32", shape, data: Float32Array}. `spec.training.seed` may be a
 * BigInt or a decimal string (`exactSeed`), or a number below 2^53. */
export function initialWeights(spec, shape) {
  const kernels = (spec.determinism || {}).kernels || ["torch"];
  if (!kernels.includes("wasm32")) {
    throw new Error("this task's W_0 is torch's initialisation: only a task allowing wasm32 has a portable one");
  }
  const sizes = mlpSizes(spec, shape);
  const seed = seedOf(spec);
  const weights = new Map();
  for (let layer = 0; layer + 1 < sizes.length; layer++) {
    const [inputs, outputs] = [sizes[layer], sizes[layer + 1]];
    weights.set(`layers.${2 * layer}.weight`,
      { dtype: "float32", shape: [outputs, inputs], data: uniformTensor(seed, 2 * layer, outputs * inputs, inputs) });
    weights.set(`layers.${2 * layer}.bias`,
      { dtype: "float32", shape: [outputs], data: uniformTensor(seed, 2 * layer + 1, outputs, inputs) });
  }
  return weights;
}
