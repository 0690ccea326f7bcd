// The canonical bytes of named tensors (compute/canonical.py's `encode_tensors`) and their sha256: what a
// residual is stored as and what a weights hash (`start_weights_hash`, W_r) is taken over. Decoding is
// bwdata's `canonical.js`; compute/wasm/checkpoint.mjs writes the same format for the kernel's checkpoints.
//
//   encodeTensors(new Map([["layers.0.bias", {dtype: "float32", shape: [24], data}]]))   // Uint8Array
//   weightsHash(weights)                                                                    // hex

import { encodeTensors as encodeTensorBytes } from "../../../../compute/wasm/canonical.mjs";
import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";

/** Canonical bytes of a Map name -> {dtype ("float32", the default, or "int64"), shape, data}: the tab's weights,
 * moments and residuals as typed arrays, handed to the one encoder of the format (compute/wasm/canonical.mjs) as
 * little-endian bytes. */
export function encodeTensors(tensors) {
  const named = new Map();
  for (const [name, { dtype = "float32", shape, data }] of tensors) {
    named.set(name, { dtype, shape, bytes: littleEndianBytes(dtype, data) });
  }
  return encodeTensorBytes(named);
}

/** The little-endian bytes of float32 `data` (any array of numbers) or int64 `data` (numbers or BigInts). */
function littleEndianBytes(dtype, data) {
  if (dtype !== "float32" && dtype !== "int64") throw new Error(`dtype ${dtype} has no canonical code here`);
  const size = dtype === "float32" ? 4 : 8;
  const view = new DataView(new ArrayBuffer(data.length * size));
  for (let i = 0; i < data.length; i++) {
    if (dtype === "float32") view.setFloat32(i * size, data[i], true);
    else view.setBigInt64(i * size, BigInt(data[i]), true);
  }
  return new Uint8Array(view.buffer);
}

/** sha256 (hex) of the canonical bytes of `tensors`: compute/checkpoints.py's `weights_hash`. */
export function weightsHash(tensors) {
  return toHex(sha256(encodeTensors(tensors)));
}

/** sha256 (hex) of bytes. */
export function sha256Hex(bytes) {
  return toHex(sha256(bytes));
}
