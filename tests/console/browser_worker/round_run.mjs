// A browser worker's round trained in Node.js as the page's Web Worker trains it (round_segments.js on the .wasm
// or on the JavaScript twin), from a description test_browser_round.py writes; prints the checkpoint hashes.
//
//   node round_run.mjs description.json   ->   {"kernel": "wasm", "hashes": [...], "steps": [...], "endWeights": "b64"}

import { readFileSync } from "node:fs";
import { JsKernel, WasmKernel } from "../../../compute/wasm/kernel.mjs";
import { prepareTask, trainRound } from "../../../console/web/src/browser_worker/round_segments.js";
import { readTaskSpec } from "../../../console/web/src/browser_worker/task_spec.js";

const bytesOf = (text) => new Uint8Array(Buffer.from(text, "base64"));
const description = JSON.parse(readFileSync(process.argv[2], "utf8"));
const task = readTaskSpec(description.specText, description.shape);
const kernel = description.kind === "wasm"
  ? await WasmKernel.load(readFileSync(new URL("../../../compute/wasm/kernel.wasm", import.meta.url)))
  : new JsKernel();
const data = { inputs: new Float32Array(bytesOf(description.inputs).buffer),
  targets: new Uint32Array(bytesOf(description.targets).buffer) };
prepareTask(kernel, task, data, description.cheat);
const round = { startWeights: new Float32Array(bytesOf(description.startWeights).buffer),
  workerIndex: description.workerIndex, roundIndex: description.roundIndex, steps: description.steps };
const checkpoints = [...trainRound(kernel, task, round, description.cheat)];
const last = checkpoints[checkpoints.length - 1];
console.log(JSON.stringify({ kernel: description.kind, hashes: checkpoints.map((c) => c.hash),
  steps: checkpoints.map((c) => c.step), seed: String(task.training.seed),
  endWeights: Buffer.from(last.weights.buffer, last.weights.byteOffset, last.weights.byteLength).toString("base64") }));
