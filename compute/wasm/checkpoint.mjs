// A kernel state as the protocol's checkpoint: the canonical tensor bytes of compute/canonical.py and their
// sha256, the hash a worker commits and a verifier recomputes (compute/checkpoints.py names the entries).
//
//   checkpointHash(sizes, {step, weights, expAvg, expAvgSq, adamStep})   // hex, as checkpoint_hash in Python
//   checkpointHash(sizes, state, {final: true})                          // a round's last: step and weights

import { sha256, toHex } from "./sha256.mjs";

const MAGIC = [0x54, 0x52, 0x4c, 0x54]; // "TRLT"
const VERSION = 1;
const FLOAT32 = 1;
const INT64 = 4;

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
  named.set("step", { dtype: INT64, shape: [], bytes: step });
  const adamStep = littleEndianBytes(new Float32Array([state.adamStep]));
  for (const { name, shape, offset, size } of parameterShapes(sizes)) {
    const part = (array) => littleEndianBytes(array.subarray(offset, offset + size));
    named.set(`weights/${name}`, { dtype: FLOAT32, shape, bytes: part(state.weights) });
    if (final) continue;
    named.set(`adamw/${name}/step`, { dtype: FLOAT32, shape: [], bytes: adamStep });
    named.set(`adamw/${name}/exp_avg`, { dtype: FLOAT32, shape, bytes: part(state.expAvg) });
    named.set(`adamw/${name}/exp_avg_sq`, { dtype: FLOAT32, shape, bytes: part(state.expAvgSq) });
  }
  return named;
}

/** The canonical bytes of the state as a checkpoint (names in ascending byte order: ASCII sorts as UTF-16). */
export function checkpointBytes(sizes, state, { final = false } = {}) {
  const named = entries(sizes, state, final);
  const names = [...named.keys()].sort();
  const encoder = new TextEncoder();
  const pieces = [];
  const header = new DataView(new ArrayBuffer(9));
  MAGIC.forEach((byte, i) => header.setUint8(i, byte));
  header.setUint8(4, VERSION);
  header.setUint32(5, names.length, true);
  pieces.push(new Uint8Array(header.buffer));
  for (const name of names) {
    const { dtype, shape, bytes } = named.get(name);
    const nameBytes = encoder.encode(name);
    const entry = new DataView(new ArrayBuffer(2 + nameBytes.length + 2 + 8 * shape.length));
    entry.setUint16(0, nameBytes.length, true);
    new Uint8Array(entry.buffer).set(nameBytes, 2);
    entry.setUint8(2 + nameBytes.length, dtype);
    entry.setUint8(3 + nameBytes.length, shape.length);
    shape.forEach((size, i) => entry.setBigUint64(4 + nameBytes.length + 8 * i, BigInt(size), true));
    pieces.push(new Uint8Array(entry.buffer), bytes);
  }
  const out = new Uint8Array(pieces.reduce((total, piece) => total + piece.length, 0));
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.length;
  }
  return out;
}

/** The checkpoint's sha256 in hex: compute/checkpoints.py's checkpoint_hash of the same state. */
export function checkpointHash(sizes, state, options = {}) {
  return toHex(sha256(checkpointBytes(sizes, state, options)));
}
