// The top-k codecs of compute/codecs/topk.py, bit for bit: per chunk of 65,536 values, the k = ceil(L * density)
// of largest magnitude (ties to the lower index), their chunk-local uint16 indices ascending, their values in
// fp32, fp16 or int8 (one float32 scale per chunk: the largest kept magnitude / 127).
//
// Payload: every chunk's indices, then every chunk's values, then (int8) every chunk's scale.

import { ByteWriter } from "./bytes.js";
import { CodecError, finish, payloadReader } from "./codec_frame.js";
import { quantizeInt8 } from "./codecs_dense.js";
import { fromHalfBits, toHalfBits } from "./float_bits.js";

const CHUNK = 65536;
const FP16_MAX = 65504;
const fround = Math.fround;

/** How many of a chunk of `length` values are kept at density numerator / denominator. */
function keptPerChunk(length, [numerator, denominator]) {
  return Math.min(length, Math.ceil((length * numerator) / denominator));
}

function chunkLengths(size) {
  const lengths = [];
  for (let start = 0; start < size; start += CHUNK) lengths.push(Math.min(CHUNK, size - start));
  return lengths;
}

/** Ascending indices of the k largest |values|, ties to the lower index (topk.py's `select_top`). */
export function selectTop(values, k) {
  if (k >= values.length) return Uint32Array.from(values, (_, i) => i);
  const magnitudes = Float32Array.from(values, Math.abs);
  const threshold = Float32Array.from(magnitudes).sort()[values.length - k]; // the k-th largest
  let above = 0;
  for (const magnitude of magnitudes) if (magnitude > threshold) above++;
  let tiesLeft = k - above;
  const chosen = new Uint32Array(k);
  let next = 0;
  for (let i = 0; i < magnitudes.length; i++) {
    if (magnitudes[i] > threshold || (magnitudes[i] === threshold && tiesLeft-- > 0)) chosen[next++] = i;
  }
  return chosen;
}

function topkCodec(name, density, valueFormat) {
  return {
    name,
    encodeFlat(flat) {
      const decoded = new Float32Array(flat.length);
      const indices = [];
      const values = [];
      const scales = [];
      let largest = 0; // of every kept value, before conversion
      chunkLengths(flat.length).forEach((length, number) => {
        const base = number * CHUNK;
        const chunk = flat.subarray(base, base + length);
        const chosen = selectTop(chunk, keptPerChunk(length, density));
        chosen.forEach((index) => indices.push(index));
        const kept = Array.from(chosen, (i) => chunk[i]);
        kept.forEach((value) => { largest = Math.max(largest, Math.abs(value)); });
        if (valueFormat === "int8") {
          const scale = fround(kept.reduce((largest, value) => Math.max(largest, Math.abs(value)), 0) / 127);
          scales.push(scale);
          kept.forEach((value, j) => {
            const quantized = quantizeInt8(value, scale);
            values.push(quantized);
            decoded[base + chosen[j]] = fround(quantized * scale);
          });
        } else if (valueFormat === "fp16") {
          kept.forEach((value, j) => {
            const bits = toHalfBits(value);
            values.push(bits);
            decoded[base + chosen[j]] = fromHalfBits(bits);
          });
        } else {
          kept.forEach((value, j) => {
            values.push(value);
            decoded[base + chosen[j]] = value;
          });
        }
      });
      const out = new ByteWriter().uint16s(indices);
      if (valueFormat === "fp32") out.float32s(values);
      else if (valueFormat === "int8") out.int8s(Int8Array.from(values)).float32s(scales);
      else {
        if (largest > FP16_MAX) {
          throw new CodecError(`fp16 cannot carry values beyond ${FP16_MAX}.0`);
        }
        out.uint16s(values);
      }
      return { payload: out.finish(), decoded };
    },
    decodeFlat(payload, size) {
      const lengths = chunkLengths(size);
      const counts = lengths.map((length) => keptPerChunk(length, density));
      const total = counts.reduce((sum, count) => sum + count, 0);
      const reader = payloadReader(payload);
      const indices = reader.uint16s(total);
      let values;
      if (valueFormat === "fp32") values = reader.float32s(total);
      else if (valueFormat === "fp16") values = Float32Array.from(reader.uint16s(total), fromHalfBits);
      else {
        const quantized = reader.int8s(total);
        const scales = reader.float32s(lengths.length);
        if (scales.some((scale) => !Number.isFinite(scale) || scale < 0)) {
          throw new CodecError("top-k int8 scales must be finite and non-negative");
        }
        const chunkOf = counts.flatMap((count, c) => Array(count).fill(c));
        values = Float32Array.from(quantized, (q, j) => fround(q * scales[chunkOf[j]]));
      }
      finish(reader);
      const flat = new Float32Array(size);
      let begin = 0;
      lengths.forEach((length, number) => {
        for (let j = begin; j < begin + counts[number]; j++) {
          if (indices[j] >= length || (j > begin && indices[j] <= indices[j - 1])) {
            throw new CodecError(`top-k indices of chunk ${number} are out of range or not strictly ascending`);
          }
          flat[number * CHUNK + indices[j]] = values[j];
        }
        begin += counts[number];
      });
      return flat;
    },
  };
}

export const topk = topkCodec("topk", [1, 64], "fp32");
export const topkFp16 = topkCodec("topk-fp16", [1, 64], "fp16");
export const topkInt8 = topkCodec("topk-int8", [1, 64], "int8");
export const topkInt8Sparse = topkCodec("topk-int8-sparse", [1, 256], "int8");
