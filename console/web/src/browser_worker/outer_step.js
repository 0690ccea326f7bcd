// From a round's passed updates to the next global weights, bit for bit compute/outer_step.py:
//
//   mean      = sum_i samples_i * update_i / sum_i samples_i        (workers in ascending index order)
//   momentum' = mu * momentum + mean
//   W_{r+1}   = W_r - lr * (mean + mu * momentum')                   (Nesterov)
//
// in float64, one operation at a time (JavaScript never fuses a multiply-add), rounded to float32 at the end. A
// round in which no update passed leaves weights and momentum as they were.
//
// A state is {round, weights, momentum}: Maps name -> {dtype, shape, data: Float32Array}.

import { decode } from "./codecs.js";
import { weightsHash } from "./canonical_encode.js";

/** A round's start that cannot be derived or does not aggregate (compute/errors.py's RoundError). */
export class RoundError extends Error {
  constructor(message) {
    super(message);
    this.name = "RoundError";
  }
}

/** W_0's state: the weights and a zero momentum. */
export function initialState(weights) {
  const momentum = new Map();
  for (const [name, { shape, data }] of weights) {
    momentum.set(name, { dtype: "float32", shape, data: new Float32Array(data.length) });
  }
  return { round: 0, weights, momentum };
}

/** The hash of a state's weights (`start_weights_hash`). */
export function stateHash(state) {
  return weightsHash(state.weights);
}

function sameShape(a, b) {
  return a.length === b.length && a.every((size, i) => size === b[i]);
}

/** The samples-weighted mean update per name (Float64Array), summed in ascending worker index. */
function meanUpdate(updates, names) {
  const ordered = [...updates].sort((a, b) => a.workerIndex - b.workerIndex);
  if (new Set(ordered.map((u) => u.workerIndex)).size !== ordered.length) {
    throw new RoundError("two updates from the same worker index");
  }
  let total = 0;
  for (const update of ordered) {
    if (!Number.isSafeInteger(update.samplesProcessed) || update.samplesProcessed <= 0) {
      throw new RoundError(`worker ${update.workerIndex} reports ${update.samplesProcessed} samples`);
    }
    if (update.update.size !== names.length || !names.every((name) => update.update.has(name))) {
      throw new RoundError(`worker ${update.workerIndex}'s update does not have the model's tensors`);
    }
    total += update.samplesProcessed;
  }
  const mean = new Map();
  for (const name of names) {
    let accumulator = null;
    for (const update of ordered) {
      const values = update.update.get(name).data;
      const samples = update.samplesProcessed;
      if (accumulator === null) accumulator = Float64Array.from(values, (value) => value * samples);
      else for (let i = 0; i < values.length; i++) accumulator[i] = accumulator[i] + values[i] * samples;
    }
    mean.set(name, accumulator.map((value) => value / total));
  }
  return mean;
}

/** W_{r+1} and the new momentum from the decoded passed updates [{workerIndex, samplesProcessed, update}]. */
export function outerStep(state, updates, outer) {
  const names = [...state.weights.keys()].sort();
  if (updates.length === 0) return { round: state.round + 1, weights: state.weights, momentum: state.momentum };
  for (const update of updates) {
    for (const name of names) {
      const tensor = update.update.get(name);
      if (tensor && !sameShape(tensor.shape, state.weights.get(name).shape)) {
        throw new RoundError(`worker ${update.workerIndex}'s update for '${name}' has the wrong shape`);
      }
    }
  }
  const mean = meanUpdate(updates, names);
  const { lr, momentum: mu } = outer;
  const weights = new Map();
  const momentum = new Map();
  for (const name of names) {
    const { shape, data: old } = state.weights.get(name);
    const oldMomentum = state.momentum.get(name).data;
    const average = mean.get(name);
    const newWeights = new Float32Array(old.length);
    const newMomentum = new Float32Array(old.length);
    for (let i = 0; i < old.length; i++) {
      const m = mu * oldMomentum[i] + average[i];
      const step = average[i] + mu * m;
      newWeights[i] = old[i] - lr * step; // the store rounds the double to float32, once
      newMomentum[i] = m;
    }
    weights.set(name, { dtype: "float32", shape, data: newWeights });
    momentum.set(name, { dtype: "float32", shape, data: newMomentum });
  }
  return { round: state.round + 1, weights, momentum };
}

/** The spec's outer optimizer's lr and momentum (compute/spec.py's defaults when it names none). */
export function outerOptimizer(spec) {
  const outer = spec.training.outer_optimizer || {};
  return { lr: outer.lr ?? 0.7, momentum: outer.momentum ?? 0.9 };
}

/** W_{r+1} from W_r and round r's passed updates as [{workerIndex, samplesProcessed, bytes}], each decoded with the
 * spec's codec (compute/outer_step.py's `aggregate_round`). */
export function aggregateRound(previous, encodedUpdates, spec) {
  const updates = encodedUpdates.map(({ workerIndex, samplesProcessed, bytes }) =>
    ({ workerIndex, samplesProcessed, update: decode(spec.codec, bytes) }));
  return outerStep(previous, updates, outerOptimizer(spec));
}
