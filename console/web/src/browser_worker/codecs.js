// The update codecs by the names a spec gives them (compute/codecs/__init__.py's registry), each bit for bit the
// Python one: `encode(name, tensors)` and `decode(name, bytes)` over the framing of codec_frame.js.
//
//   const { bytes, decoded } = encode("int8", tensors);   // tensors: Map name -> {shape, data: Float32Array}
//   const tensors = decode("int8", bytes);                // CodecError when the bytes are not such an update

import { CodecError, flatten, frame, readFrame, unflatten } from "./codec_frame.js";
import { fp16, fp32, int8, sign, ternary } from "./codecs_dense.js";
import { topk, topkFp16, topkInt8, topkInt8Sparse } from "./codecs_topk.js";

export const CODECS = new Map(
  [fp32, fp16, int8, sign, ternary, topk, topkFp16, topkInt8, topkInt8Sparse].map((codec) => [codec.name, codec]),
);

function codecNamed(name) {
  const codec = CODECS.get(name);
  if (!codec) throw new CodecError(`unknown codec '${name}'; known: ${[...CODECS.keys()].sort().join(", ")}`);
  return codec;
}

/** The encoded update of `tensors` and what it decodes to (a Map of the same names and shapes). */
export function encode(name, tensors) {
  const codec = codecNamed(name);
  const { header, layout } = frame(name, tensors);
  const { payload, decoded } = codec.encodeFlat(flatten(tensors, layout));
  const bytes = new Uint8Array(header.length + payload.length);
  bytes.set(header);
  bytes.set(payload, header.length);
  return { bytes, decoded: unflatten(decoded, layout) };
}

/** The tensors an update's bytes decode to; CodecError when they are malformed. */
export function decode(name, bytes) {
  const codec = codecNamed(name);
  const { layout, total, payload } = readFrame(bytes, name);
  return unflatten(codec.decodeFlat(payload, total), layout);
}

export { CodecError };
