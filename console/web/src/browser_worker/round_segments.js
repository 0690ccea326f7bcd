// One round of a browser worker trained segment by segment on the wasm32 kernel (or its JavaScript twin): the
// checkpoints 0..n a native worker would store for the same round, as canonical bytes with their hashes.
//
//   prepareTask(kernel, task, data);                           // once per task: model, data, AdamW, schedule
//   for (const checkpoint of trainRound(kernel, task, round)) ...   // {index, step, bytes, hash, losses}
//                                                    // the last one with `weights` too, flat
//
// The round is compute/training.py's `train_round_segments` for the kernel: checkpoint 0 is the start weights
// W_r with an AdamW that has not stepped (step 0, zero moments); segment s trains steps [s*k, min((s+1)*k, n))
// and its end state is checkpoint s+1, the last in the form of a round's last checkpoint (step and weights
// only). The batches are the kernel's own (seed, worker, round, step), so the bytes are those a native
// `--kernel wasm32` worker makes and a verifier replays (docs/browser-worker.md). No DOM: it runs in the page's
// Web Worker (train_worker.js) and in Node.js (the tests).
//
// TEST SWITCH: a cheat's name (cheats.js) sets the kernel up as its lie needs and fakes the segments
// (cheat_segments.js); '' trains honestly.

import { checkpointBytes } from "../../../../compute/wasm/checkpoint.mjs";
import { SCHEDULE_KINDS } from "../../../../compute/wasm/kernel.mjs";
import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";
import { cheatPlan } from "./cheats.js";

/** Set the kernel up for the task's model, training data, AdamW and lr schedule. `data`: {inputs, targets} of
 * the training split (and testInputs, testTargets, which only a test's cheat reads); `cheat`: TEST SWITCH. */
export function prepareTask(kernel, task, data, cheat = "") {
  const { training } = task;
  const plan = cheatPlan(cheat);
  const { lrScale, batchFraction } = plan.kernel;
  kernel.configure(task.sizes, Math.max(1, Math.floor(task.batchSize * batchFraction)));
  const trained = plan.data(data);
  kernel.setData(trained.inputs, trained.targets);
  kernel.setOptimizer(training.beta1, training.beta2, training.eps, training.weightDecay);
  const schedule = training.schedule;
  if (!(schedule.name in SCHEDULE_KINDS)) throw new RangeError(`unknown lr schedule ${schedule.name}`);
  kernel.setSchedule(training.lr * lrScale, SCHEDULE_KINDS[schedule.name], schedule.warmupSteps, schedule.finalLr,
    training.rounds, training.innerSteps);
}

/** [begin, end) of segment `segment` of a round of `steps` steps, a checkpoint every `every` steps. */
export function segmentBounds(segment, steps, every) {
  const begin = segment * every;
  return [begin, Math.min(begin + every, steps)];
}

function checkpointOf(task, index, state, final, losses) {
  const bytes = checkpointBytes(task.sizes, state, { final });
  const checkpoint = { index, step: state.step, bytes, hash: toHex(sha256(bytes)), losses };
  return final ? { ...checkpoint, weights: state.weights } : checkpoint; // the round's end weights, flat
}

/** The round's checkpoints, one at a time (the caller shows progress and publishes each as it comes).
 * `round`: {startWeights: Float32Array (the kernel's flat layout), workerIndex, roundIndex, steps}; `cheat`
 * (TEST SWITCH, cheats.js): a segment cheat's name, '' for an honest round. */
export function* trainRound(kernel, task, round, cheat = "") {
  const plan = cheatPlan(cheat);
  const zeros = new Float32Array(round.startWeights.length);
  const start = { step: 0, weights: round.startWeights, expAvg: zeros, expAvgSq: zeros, adamStep: 0 };
  kernel.load(start);
  kernel.setStream(task.training.seed, round.workerIndex, round.roundIndex);
  yield checkpointOf(task, 0, start, false, []);
  const segments = numSegments(round.steps, task.checkpointEvery);
  let state = start;
  for (let segment = 0; segment < segments; segment++) {
    const [begin, end] = segmentBounds(segment, round.steps, task.checkpointEvery);
    const trained = plan.segment(kernel, { segment, segments, begin, end, start: state, task, round });
    state = trained.state;
    yield checkpointOf(task, segment + 1, state, end === round.steps, trained.losses);
  }
}

/** Segments of a round of `steps` steps (checkpoints less one). */
export function numSegments(steps, every) {
  return Math.ceil(steps / every);
}
