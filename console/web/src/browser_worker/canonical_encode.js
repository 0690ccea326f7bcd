// The canonical bytes of named tensors (compute/canonical.py's `encode_tensors`) and their sha256: what a
// residual is stored as and what a weights hash (`start_weights_hash`, W_r) is taken over. Decoding is
// bwdata's `canonical.js`; compute/wasm/checkpoint.mjs writes the same format for the kernel's checkpoints.
//
//   encodeTensors(new Map([["layers.0.bias", {dtype: "float32", shape: [24], data}]]))   // Uint8Array
//   weightsHash(weights)                                                                    // hex

import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";
import { ByteWriter, sortedByBytes, utf8 } from "./bytes.js";

const MAGIC = [0x54, 0x52, 0x4c, 0x54]; // "TRLT"
const VERSION = 1;
const DTYPE_CODES = { float32: 1, int64: 4 };

/** Canonical bytes of a Map name -> {dtype ("float32", the default, or "int64"), shape, data}. */
export function encodeTensors(tensors) {
  const out = new ByteWriter();
  MAGIC.forEach((byte) => out.u8(byte));
  out.u8(VERSION).u32(tensors.size);
  for (const name of sortedByBytes([...tensors.keys()])) {
    const { dtype = "float32", shape, data } = tensors.get(name);
    if (!(dtype in DTYPE_CODES)) throw new Error(`dtype ${dtype} has no canonical code here`);
    const nameBytes = utf8(name);
    out.u16(nameBytes.length).bytes(nameBytes).u8(DTYPE_CODES[dtype]).u8(shape.length);
    shape.forEach((size) => out.u64(size));
    if (dtype === "float32") out.float32s(data);
    else data.forEach((value) => out.scalar(8, (v) => v.setBigInt64(0, BigInt(value), true)));
  }
  return out.finish();
}

/** sha256 (hex) of the canonical bytes of `tensors`: compute/checkpoints.py's `weights_hash`. */
export function weightsHash(tensors) {
  return toHex(sha256(encodeTensors(tensors)));
}

/** sha256 (hex) of bytes. */
export function sha256Hex(bytes) {
  return toHex(sha256(bytes));
}
