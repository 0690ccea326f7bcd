// A kernel state as the protocol's checkpoint: the canonical tensor bytes of compute/canonical.py and their
// sha256, the hash a worker commits and a verifier recomputes (compute/checkpoints.py names the entries).
//
//   checkpointHash(sizes, {step, weights, expAvg, expAvgSq, adamStep})   // hex, as checkpoint_hash in Python
//   checkpointHash(sizes, state, {final: true})                          // a round's last: step and weights

import { encodeTensors } from "./canonical.mjs";
import { sha256, toHex } from "./sha256.mjs";

/** Each parameter's state_dict name, shape and place in the kernel's flat arrays (per layer: weight, bias). */
export function parameterShapes(sizes) {
  const shapes = [];
  let offset = 0;
  for (let layer = 0; layer + 1 < sizes.length; layer++) {
    const [inputs, outputs] = [sizes[layer], sizes[layer + 1]];
    shapes.push({ name: `layers.${2 * layer}.weight`, shape: [outputs, inputs], offset, size: outputs * inputs });
    offset += outputs * inputs;
    shapes.push({ name: `layers.${2 * layer}.bias`, shape: [outputs], offset, size: outputs });
    offset += outputs;
  }
  return shapes;
}

function littleEndianBytes(floats) {
  if (new Uint8Array(new Uint16Array([1]).buffer)[0] === 1) {
    return new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
  }
  const bytes = new Uint8Array(floats.length * 4); // a big-endian host: swap each float's bytes
  const source = new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
  for (let i = 0; i < bytes.length; i += 4) for (let j = 0; j < 4; j++) bytes[i + j] = source[i + 3 - j];
  return bytes;
}

/** The checkpoint's entries: name -> {dtype, shape, bytes}. */
function entries(sizes, state, final) {
  const named = new Map();
  const step = new Uint8Array(8);
  new DataView(step.buffer).setBigInt64(0, BigInt(state.step), true);
  named.set("step", { dtype: "int64", shape: [], bytes: step });
  const adamStep = littleEndianBytes(new Float32Array([state.adamStep]));
  for (const { name, shape, offset, size } of parameterShapes(sizes)) {
    const part = (array) => littleEndianBytes(array.subarray(offset, offset + size));
    named.set(`weights/${name}`, { dtype: "float32", shape, bytes: part(state.weights) });
    if (final) continue;
    named.set(`adamw/${name}/step`, { dtype: "float32", shape: [], bytes: adamStep });
    named.set(`adamw/${name}/exp_avg`, { dtype: "float32", shape, bytes: part(state.expAvg) });
    named.set(`adamw/${name}/exp_avg_sq`, { dtype: "float32", shape, bytes: part(state.expAvgSq) });
  }
  return named;
}

/** The canonical bytes of the state as a checkpoint (canonical.mjs orders the names). */
export function checkpointBytes(sizes, state, { final = false } = {}) {
  return encodeTensors(entries(sizes, state, final));
}

/** The checkpoint's sha256 in hex: compute/checkpoints.py's checkpoint_hash of the same state. */
export function checkpointHash(sizes, state, options = {}) {
  return toHex(sha256(checkpointBytes(sizes, state, options)));
}
