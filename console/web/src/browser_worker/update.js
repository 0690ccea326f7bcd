// A worker's update of a round, as compute/worker/round_training.py's `encode_update` makes it, bit for bit:
// the pseudo-gradient W_r - W_end plus the error-feedback residual e of its previous round in the task (zero in
// its first), encoded with the task's codec; the new residual e' = (W_r - W_end + e) - decode(update) in the
// canonical tensor bytes (docs/protocol.md section 2). Both are blobs, committed by their sha256.
//
//   const { update, updateHash, residual, residualHash, residualTensors } =
//     encodeUpdate(spec, startWeights, endWeights, previousResidualTensors /* or null */);
//
// Weights and residuals are Maps name -> {shape, data: Float32Array} (initial_weights.js, canonical.js's decode).

import { CodecError, encode } from "./codecs.js";
import { encodeTensors, sha256Hex } from "./canonical_encode.js";

const fround = Math.fround;

function sameShape(a, b) {
  return a.length === b.length && a.every((size, i) => size === b[i]);
}

/** (start - end) + residual per tensor, each operation rounded to float32 as torch does it. */
function correctedPseudoGradient(start, end, residual) {
  const names = [...end.keys()];
  const sameNames = (map) => map.size === end.size && names.every((name) => map.has(name));
  if (!sameNames(start) || (residual && !sameNames(residual))) {
    throw new CodecError("the start weights, end weights and residuals name different tensors");
  }
  const corrected = new Map();
  for (const name of names) {
    const { shape, data: endData } = end.get(name);
    const startData = start.get(name).data;
    const residualData = residual ? residual.get(name).data : null;
    if (!sameShape(start.get(name).shape, shape) || (residual && !sameShape(residual.get(name).shape, shape))) {
      throw new CodecError(`'${name}' has different shapes in the start weights, end weights or residual`);
    }
    const data = new Float32Array(endData.length);
    for (let i = 0; i < data.length; i++) {
      const difference = fround(startData[i] - endData[i]);
      data[i] = residualData ? fround(difference + residualData[i]) : difference;
    }
    corrected.set(name, { dtype: "float32", shape, data });
  }
  return corrected;
}

/** The update and the new residual of a round (module comment). `spec`: the task's spec document. */
export function encodeUpdate(spec, startWeights, endWeights, residual) {
  const corrected = correctedPseudoGradient(startWeights, endWeights, residual);
  const { bytes: update, decoded } = encode(spec.codec, corrected);
  const residualTensors = new Map();
  for (const [name, { shape, data }] of corrected) {
    const sent = decoded.get(name).data;
    residualTensors.set(name, { dtype: "float32", shape, data: data.map((value, i) => fround(value - sent[i])) });
  }
  const residualBytes = encodeTensors(residualTensors);
  return { update, updateHash: sha256Hex(update), residual: residualBytes, residualHash: sha256Hex(residualBytes),
    residualTensors };
}
