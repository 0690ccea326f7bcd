// A test vector (tests/helpers/wasm_helpers.py writes it) trained on either kernel, in Node.js or in a browser:
// decodes its base64 arrays into the segment compute/wasm/segment.mjs runs, and reports the hash and losses.

import { JsKernel, WasmKernel } from "../../../compute/wasm/kernel.mjs";
import { runSegment } from "../../../compute/wasm/segment.mjs";

function bytesOf(base64) {
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

const floats = (base64) => new Float32Array(bytesOf(base64).buffer);

export function segmentOf(vector) {
  const { start, training } = vector;
  return {
    sizes: vector.sizes, batchSize: vector.batchSize,
    training: { ...training, seed: BigInt(training.seed) },
    data: { inputs: floats(vector.data.inputs), targets: new Uint32Array(bytesOf(vector.data.targets).buffer) },
    start: { step: start.step, adamStep: start.adamStep, weights: floats(start.weights),
      expAvg: floats(start.expAvg), expAvgSq: floats(start.expAvgSq) },
    workerIndex: vector.workerIndex, roundIndex: vector.roundIndex, endStep: vector.endStep, final: vector.final,
  };
}

/** {hash, losses} of the vector's segment on the .wasm (`kind` "wasm", given its bytes) or the JS fallback. */
export async function runVector(vector, kind, wasmBytes) {
  const kernel = kind === "wasm" ? await WasmKernel.load(wasmBytes) : new JsKernel();
  const { hash, losses } = runSegment(kernel, segmentOf(vector));
  return { kind, hash, losses };
}
