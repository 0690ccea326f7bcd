// A browser worker's rounds played by a test cheat of the page (cheats.js) in Node.js, through the page's own
// round code: the kernel set up and each segment trained or faked (round_segments.js), the round made into its
// listing, blobs and commitment (round_publication.js), round after round with the residual carried, as
// protocol.js does; and the final report's hash the cheat would commit. test_browser_cheats.py hands what it
// prints to the verifier's replay.
//
//   node cheat_round_run.mjs description.json
//   -> {"rounds": [{listing, blobs: {hash: b64}, withheld, commit}], "finalHash": hex}

import { readFileSync } from "node:fs";
import { JsKernel, WasmKernel } from "../../../compute/wasm/kernel.mjs";
import { cheatPlan } from "../../../console/web/src/browser_worker/cheats.js";
import { presentRound } from "../../../console/web/src/browser_worker/round_publication.js";
import { prepareTask, trainRound } from "../../../console/web/src/browser_worker/round_segments.js";
import { readTaskSpec } from "../../../console/web/src/browser_worker/task_spec.js";
import { namedWeights } from "../../../console/web/src/browser_worker/weights_layout.js";

const bytesOf = (text) => new Uint8Array(Buffer.from(text, "base64"));
const floatsOf = (text) => new Float32Array(bytesOf(text).buffer);
const classesOf = (text) => new Uint32Array(bytesOf(text).buffer);
const b64 = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");

const description = JSON.parse(readFileSync(process.argv[2], "utf8"));
const task = readTaskSpec(description.specText, description.shape);
const spec = task.spec;
spec.training.seed = task.training.seed; // exact, as protocol.js sets it
const data = { inputs: floatsOf(description.inputs), targets: classesOf(description.targets),
  testInputs: floatsOf(description.testInputs), testTargets: classesOf(description.testTargets) };
const wasm = readFileSync(new URL("../../../compute/wasm/kernel.wasm", import.meta.url));

async function kernelFor(cheat) {
  const kernel = description.kind === "js" ? new JsKernel() : await WasmKernel.load(wasm);
  const plan = cheatPlan(cheat);
  prepareTask(kernel, task, plan.testSplit ? data : { inputs: data.inputs, targets: data.targets }, cheat);
  return kernel;
}

const rounds = [];
let residual = null;
let previous = null;
for (const round of description.rounds) {
  const kernel = await kernelFor(round.cheat);
  const presented = await presentRound({
    plan: cheatPlan(round.cheat), spec, task, workerIndex: description.workerIndex, round: round.round, residual,
    previous, start: { weights: namedWeights(floatsOf(round.startWeights), task.sizes), hash: round.startHash },
    train: async (planned) => {
      const checkpoints = [...trainRound(kernel, task, planned, round.cheat)];
      return { checkpoints, endWeights: checkpoints[checkpoints.length - 1].weights };
    },
  });
  residual = presented.residualTensors;
  previous = presented.played;
  rounds.push({ listing: presented.listing, withheld: presented.withheld, commit: presented.commit,
    blobs: Object.fromEntries([...presented.blobs].map(([digest, bytes]) => [digest, b64(bytes)])) });
}
const finalHash = cheatPlan(description.rounds.at(-1).cheat).round.finalHash(description.finalHash);
console.log(JSON.stringify({ rounds, finalHash }));
