// A segment of a round on either kernel, from a description every party can hold: the same segment gives the
// same checkpoint hash from the .wasm in a browser or in Node.js, from the JavaScript fallback, and from
// wasmtime in Python (compute/wasm/segment.py), which is what the test vectors check.
//
//   const result = runSegment(kernel, segment);   // {state, hash, losses}
//
// `segment`: {sizes, batchSize, training: {seed, rounds, innerSteps, lr, beta1, beta2, eps, weightDecay,
// schedule: {name, warmupSteps, finalLr}}, data: {inputs: Float32Array, targets: Uint32Array},
// start: {step, weights, expAvg, expAvgSq, adamStep}, workerIndex, roundIndex, endStep, final}.

import { checkpointHash } from "./checkpoint.mjs";
import { SCHEDULE_KINDS } from "./kernel.mjs";

/** Set `kernel` (a fresh JsKernel or WasmKernel) up for the segment's model, data and training. */
export function prepareKernel(kernel, segment) {
  const { training } = segment;
  kernel.configure(segment.sizes, segment.batchSize);
  kernel.setData(segment.data.inputs, segment.data.targets);
  kernel.setOptimizer(training.beta1, training.beta2, training.eps, training.weightDecay);
  const schedule = training.schedule;
  if (!(schedule.name in SCHEDULE_KINDS)) throw new RangeError(`unknown schedule ${schedule.name}`);
  kernel.setSchedule(training.lr, SCHEDULE_KINDS[schedule.name], schedule.warmupSteps, schedule.finalLr,
    training.rounds, training.innerSteps);
}

/** Train the segment from its start state to its end step; the end state, its checkpoint hash and the losses.
 * `onStep(step, loss)`, when given, is called after each step (a page's progress). */
export function runSegment(kernel, segment, onStep = null) {
  prepareKernel(kernel, segment);
  kernel.load(segment.start);
  kernel.setStream(segment.training.seed, segment.workerIndex, segment.roundIndex);
  const losses = [];
  for (let step = segment.start.step; step < segment.endStep; step++) {
    const loss = kernel.trainStep(step);
    losses.push(loss);
    if (onStep) onStep(step, loss);
  }
  const state = { step: Math.max(segment.start.step, segment.endStep), ...kernel.state() };
  return { state, hash: checkpointHash(segment.sizes, state, { final: Boolean(segment.final) }), losses };
}
