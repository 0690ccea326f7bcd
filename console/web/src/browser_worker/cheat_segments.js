// TEST SWITCH ONLY: how a cheating tab fakes a segment of its round on the kernel, twin by twin of the segment
// cheats of compute/cheats/builtin.py (cheats.js names them; round_segments.js calls them). A faker gets the
// kernel standing at the segment's first step and returns the state it claims for the segment's last, labelled
// as an honest state of that step would be (checkpoint step and AdamW counter forged, `forged`), and leaves the
// kernel holding that state, so the next segment carries on from the lie as a native cheater's does.
//
//   const { state, losses } = fake(kernel, { segment, segments, begin, end, start, task, round });
//
// The lies are the native ones played with the tab's arithmetic: steps skipped or drawn on a line, no training
// at all, low precision, noise. Where the native cheat steps torch's optimizer, the twin steps the kernel, so
// the bytes differ from a native cheater's while the lie, and the verdict on it, are the same; where the native
// cheat trains nothing or only honest steps (`withheld`, `fewer_steps`), the bytes are the same too.

import { toHalfBits, fromHalfBits } from "./float_bits.js";

const f = Math.fround;

/** Train the kernel through steps [begin, end), collecting each step's loss into `losses`. */
export function trainSteps(kernel, begin, end, losses) {
  for (let step = begin; step < end; step++) losses.push(kernel.trainStep(step));
}

/** The state labelled as step `step` everywhere: the checkpoint's step and AdamW's counter (forge_counters). */
export function forged(state, step) {
  return { ...state, step, adamStep: step };
}

function settle(kernel, state, losses) {
  kernel.load(state);
  return { state, losses };
}

/** The honest segment: every step trained (also the twins whose lie is in the kernel's setup, cheats.js). */
export function honestSegment(kernel, { begin, end }) {
  const losses = [];
  trainSteps(kernel, begin, end, losses);
  return { state: { step: end, ...kernel.state() }, losses };
}

/** skipped_steps: the first half of the segment's steps trained, all of them claimed. */
export function skippedSteps(kernel, { begin, end }) {
  const losses = [];
  trainSteps(kernel, begin, begin + Math.floor((end - begin) / 2), losses);
  return settle(kernel, forged(kernel.state(), end), losses);
}

/** interpolated: one real step, then the checkpoint drawn on the line through it as far as the segment would
 * have gone (Fang et al. 2023): start + (one step - start) * length, each float32 operation rounded. */
export function interpolated(kernel, { begin, end, start }) {
  const losses = [];
  trainSteps(kernel, begin, begin + 1, losses);
  const one = kernel.state();
  const weight = end - begin;
  const mix = (a, b) => a.map((value, i) => f(value + f(f(b[i] - value) * weight)));
  const state = { weights: mix(start.weights, one.weights), expAvg: mix(start.expAvg, one.expAvg),
    expAvgSq: mix(start.expAvgSq, one.expAvgSq), adamStep: end };
  return settle(kernel, forged(state, end), losses);
}

/** withheld: nothing trained; the start state claimed as the segment's end (cheats.js keeps it unserved). */
export function untrained(kernel, { end, start }) {
  return settle(kernel, forged(start, end), []);
}

/** fewer_steps: the first segments honest, the later half (at least one) repeating the last honest state. */
export function fewerSteps(kernel, context) {
  const firstFaked = context.segments - Math.max(1, Math.floor(context.segments / 2));
  return context.segment < firstFaked ? honestSegment(kernel, context) : untrained(kernel, context);
}

/** random_weights: no training; the start weights plus noise of an honest update's size (lr times the steps),
 * from the tab's own stream (`noise`: not torch's generator, so its numbers, not its lie, are the tab's). */
export function randomWeights(kernel, { end, start, task, round, segment }) {
  const scale = task.training.lr * (end - start.step);
  const draw = noise(1000 * round.roundIndex + round.workerIndex, segment);
  const weights = start.weights.map((value) => f(value + f(scale * draw())));
  return settle(kernel, forged({ ...start, weights }, end), []);
}

/** bf16 / fp16: every step computed from weights rounded to the low precision (the data is rounded too,
 * `lowPrecision` in cheats.js), as autocast computes a layer from low-precision copies. */
export function lowPrecisionSegment(round16) {
  return (kernel, { begin, end }) => {
    const losses = [];
    for (let step = begin; step < end; step++) {
      const state = kernel.state();
      kernel.load({ ...state, weights: state.weights.map(round16) });
      losses.push(kernel.trainStep(step));
    }
    return { state: { step: end, ...kernel.state() }, losses };
  };
}

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** A float32 value rounded to bfloat16 (ties to even; a NaN stays a NaN). */
export function toBfloat16(value) {
  F32[0] = value;
  const bits = U32[0];
  if ((bits & 0x7f800000) === 0x7f800000) return value;
  U32[0] = ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) << 16;
  return F32[0];
}

/** A float32 value rounded to IEEE half and back (numpy's conversion, float_bits.js). */
export function toFloat16(value) {
  return fromHalfBits(toHalfBits(value));
}

/** Roughly standard normal numbers (the sum of four uniforms, centred and scaled) from a 32-bit stream keyed by
 * two integers: deterministic, engine-independent, and enough for a cheater's noise. */
export function noise(key, salt) {
  let state = (Math.imul(key | 0, 0x9e3779b1) ^ Math.imul(salt + 1, 0x85ebca6b)) >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return ((z ^ (z >>> 14)) >>> 0) / 4294967296;
  };
  return () => (next() + next() + next() + next() - 2) * Math.sqrt(3);
}
