// The timed segment of benchmarks/browser_worker.py: one segment of the task, trained by the .wasm or by the
// JavaScript fallback (compute/wasm/kernel.mjs), its timed steps measured and its end state hashed as a
// checkpoint, so that the benchmark can check that every kernel reached the same bytes.
//
// The segment is the files the benchmark writes: segment.json (sizes, batch, training, stream, step counts) and
// the raw little-endian arrays inputs.bin, targets.bin, weights.bin, expAvg.bin and expAvgSq.bin. It runs:
//
// - in a Web Worker of the benchmark's page, as the browser worker trains (posted {kind}, it fetches the files
//   from /segment/ and the kernel from /compute/wasm/, and answers {kind, seconds, hash} or {error});
// - under Node.js: node benchmarks/_browser_worker_run.mjs <segment folder> wasm|js prints the same as JSON.
//
// The warm-up steps come first and are not timed (the engine compiles and tiers up the code meanwhile).

import { checkpointHash } from "../compute/wasm/checkpoint.mjs";
import { JsKernel, WasmKernel } from "../compute/wasm/kernel.mjs";
import { prepareKernel } from "../compute/wasm/segment.mjs";

const ARRAYS = { inputs: Float32Array, targets: Uint32Array, weights: Float32Array, expAvg: Float32Array,
  expAvgSq: Float32Array };

/** The segment that `read(name)` (a promise of the file's ArrayBuffer) gives, as segment.mjs takes it. */
export async function loadSegment(read) {
  const about = JSON.parse(new TextDecoder().decode(await read("segment.json")));
  const arrays = {};
  for (const [name, Type] of Object.entries(ARRAYS)) arrays[name] = new Type(await read(`${name}.bin`));
  return {
    sizes: about.sizes, batchSize: about.batchSize,
    training: { ...about.training, seed: BigInt(about.training.seed) },
    data: { inputs: arrays.inputs, targets: arrays.targets },
    start: { step: about.startStep, adamStep: about.adamStep, weights: arrays.weights, expAvg: arrays.expAvg,
      expAvgSq: arrays.expAvgSq },
    workerIndex: about.workerIndex, roundIndex: about.roundIndex, warmupSteps: about.warmupSteps, steps: about.steps,
  };
}

/** {kind, seconds, hash}: the segment on a fresh kernel, `seconds` of its timed steps, the end state's hash. */
export async function timeSegment(segment, kind, wasmBytes) {
  const kernel = kind === "wasm" ? await WasmKernel.load(wasmBytes) : new JsKernel();
  prepareKernel(kernel, segment);
  kernel.load(segment.start);
  kernel.setStream(segment.training.seed, segment.workerIndex, segment.roundIndex);
  let step = segment.start.step;
  for (const end = step + segment.warmupSteps; step < end; step++) kernel.trainStep(step);
  const began = performance.now();
  for (const end = step + segment.steps; step < end; step++) kernel.trainStep(step);
  const seconds = (performance.now() - began) / 1000;
  return { kind, seconds, hash: checkpointHash(segment.sizes, { step, ...kernel.state() }) };
}

async function fetched(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.arrayBuffer();
}

function answerInWorker() {
  let segment = null;
  let wasm = null;
  self.onmessage = async ({ data: { kind } }) => {
    try {
      segment ??= await loadSegment((name) => fetched(`/segment/${name}`));
      wasm ??= await fetched("/compute/wasm/kernel.wasm");
      self.postMessage(await timeSegment(segment, kind, wasm));
    } catch (error) {
      self.postMessage({ error: String(error) });
    }
  };
}

async function answerInNode() {
  const { readFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  const [folder, kind] = process.argv.slice(2);
  const read = async (path) => {
    const bytes = readFileSync(path);
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  };
  const segment = await loadSegment((name) => read(join(folder, name)));
  const wasm = await read(new URL("../compute/wasm/kernel.wasm", import.meta.url));
  console.log(JSON.stringify(await timeSegment(segment, kind, wasm)));
}

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) {
  answerInWorker();
} else if (typeof process !== "undefined" && process.argv?.[1]
  && import.meta.url === (await import("node:url")).pathToFileURL(process.argv[1]).href) {
  await answerInNode();
}
