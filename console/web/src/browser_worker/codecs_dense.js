// The dense codecs of compute/codecs (quantize.py, ternary.py), bit for bit: fp32, fp16, int8, sign, ternary.
// Each is {name, encodeFlat(flat) -> {payload, decoded}, decodeFlat(payload, size) -> Float32Array}, `decoded`
// being what every receiver decodes the payload to (what error feedback subtracts). Every float32 operation is
// one IEEE operation rounded once (Math.fround of a double result, exact for + - * / of float32 values); the
// chunk sums are float64 additions in the fixed tree of quantize.py's `fixed_tree_sum`.

import { ByteWriter } from "./bytes.js";
import { CodecError, finish, payloadReader } from "./codec_frame.js";
import { fromHalfBits, rint, toHalfBits } from "./float_bits.js";

const INT8_CHUNK = 4096;
const SIGN_CHUNK = 1024;
const TERNARY_CHUNK = 1024;
const TERNARY_THRESHOLD = 0.75;
const FP16_MAX = 65504;
const fround = Math.fround;

function chunkCount(size, chunk) {
  return Math.ceil(size / chunk);
}

/** The float64 sum of chunk `c` of `values` (float32, >= 0), padded with zeros to `chunk`: pairs first, then
 * level by level (quantize.py's `chunk_sums`). `term(i)` reads value i. */
function treeSum(term, size, c, chunk, level) {
  const base = c * chunk;
  for (let i = 0; i < chunk / 2; i++) {
    const a = base + 2 * i < size ? term(base + 2 * i) : 0;
    const b = base + 2 * i + 1 < size ? term(base + 2 * i + 1) : 0;
    level[i] = a + b;
  }
  for (let width = chunk / 2; width > 1; width /= 2) {
    for (let j = 0; j < width / 2; j++) level[j] = level[2 * j] + level[2 * j + 1];
  }
  return level[0];
}

/** Flags packed eight to a byte, least significant bit first (np.packbits(..., bitorder="little")). */
function packBits(flags, count) {
  const out = new Uint8Array(Math.ceil(count / 8));
  for (let i = 0; i < count; i++) if (flags[i]) out[i >> 3] |= 1 << (i & 7);
  return out;
}

/** `count` flags from packed bytes; CodecError when a bit past the last one is set. */
function unpackBits(packed, count, what) {
  const flags = new Uint8Array(count);
  for (let i = 0; i < packed.length * 8; i++) {
    const bit = (packed[i >> 3] >> (i & 7)) & 1;
    if (i < count) flags[i] = bit;
    else if (bit) throw new CodecError(`${what} has stray bits after the last value`);
  }
  return flags;
}

function checkScales(scales, what) {
  if (scales.some((scale) => !Number.isFinite(scale) || scale < 0)) {
    throw new CodecError(`${what} scales must be finite and non-negative`);
  }
}

export const fp32 = {
  name: "fp32",
  encodeFlat(flat) {
    return { payload: new ByteWriter().float32s(flat).finish(), decoded: Float32Array.from(flat) };
  },
  decodeFlat(payload, size) {
    const reader = payloadReader(payload);
    const values = reader.float32s(size);
    finish(reader);
    return values;
  },
};

export const fp16 = {
  name: "fp16",
  encodeFlat(flat) {
    if (flat.some((value) => Math.abs(value) > FP16_MAX)) {
      throw new CodecError(`fp16 cannot carry values beyond ${FP16_MAX}.0`);
    }
    const bits = Uint16Array.from(flat, toHalfBits);
    return { payload: new ByteWriter().uint16s(bits).finish(), decoded: Float32Array.from(bits, fromHalfBits) };
  },
  decodeFlat(payload, size) {
    const reader = payloadReader(payload);
    const bits = reader.uint16s(size);
    finish(reader);
    return Float32Array.from(bits, fromHalfBits);
  },
};

/** Per value: rint(x / s) clipped to int8 (s = 1 where the scale is 0), as quantize.py's `quantize_int8`. */
export function quantizeInt8(value, scale) {
  const quotient = fround(value / (scale === 0 ? 1 : scale));
  return Math.min(127, Math.max(-127, rint(quotient)));
}

export const int8 = {
  name: "int8",
  encodeFlat(flat) {
    const chunks = chunkCount(flat.length, INT8_CHUNK);
    const scales = new Float32Array(chunks);
    for (let c = 0; c < chunks; c++) {
      let largest = 0;
      for (let i = c * INT8_CHUNK; i < Math.min(flat.length, (c + 1) * INT8_CHUNK); i++) {
        largest = Math.max(largest, Math.abs(flat[i]));
      }
      scales[c] = fround(largest / 127);
    }
    const quantized = new Int8Array(flat.length);
    const decoded = new Float32Array(flat.length);
    for (let i = 0; i < flat.length; i++) {
      const scale = scales[Math.floor(i / INT8_CHUNK)];
      quantized[i] = quantizeInt8(flat[i], scale);
      decoded[i] = fround(quantized[i] * scale);
    }
    return { payload: new ByteWriter().float32s(scales).int8s(quantized).finish(), decoded };
  },
  decodeFlat(payload, size) {
    const reader = payloadReader(payload);
    const scales = reader.float32s(chunkCount(size, INT8_CHUNK));
    const quantized = reader.int8s(size);
    finish(reader);
    checkScales(scales, "int8");
    return Float32Array.from(quantized, (q, i) => fround(q * scales[Math.floor(i / INT8_CHUNK)]));
  },
};

/** +-scale of each chunk by sign (the sign bit set where `negative`, so a zero scale gives -0.0 there). */
function signedScales(scales, chunk, negative, sent, size) {
  return Float32Array.from({ length: size }, (_, i) => {
    if (sent && !sent[i]) return 0;
    const scale = scales[Math.floor(i / chunk)];
    return negative[i] ? -scale : scale;
  });
}

export const sign = {
  name: "sign",
  encodeFlat(flat) {
    const chunks = chunkCount(flat.length, SIGN_CHUNK);
    const level = new Float64Array(SIGN_CHUNK / 2);
    const scales = new Float32Array(chunks);
    for (let c = 0; c < chunks; c++) {
      const length = Math.min(SIGN_CHUNK, flat.length - c * SIGN_CHUNK);
      scales[c] = treeSum((i) => Math.abs(flat[i]), flat.length, c, SIGN_CHUNK, level) / length;
    }
    const negative = Uint8Array.from(flat, (value) => value < 0);
    const payload = new ByteWriter().float32s(scales).bytes(packBits(negative, flat.length)).finish();
    return { payload, decoded: signedScales(scales, SIGN_CHUNK, negative, null, flat.length) };
  },
  decodeFlat(payload, size) {
    const reader = payloadReader(payload);
    const scales = reader.float32s(chunkCount(size, SIGN_CHUNK));
    const packed = reader.raw(Math.ceil(size / 8));
    finish(reader);
    checkScales(scales, "sign");
    return signedScales(scales, SIGN_CHUNK, unpackBits(packed, size, "sign payload"), null, size);
  },
};

export const ternary = {
  name: "ternary",
  encodeFlat(flat) {
    const size = flat.length;
    const chunks = chunkCount(size, TERNARY_CHUNK);
    const level = new Float64Array(TERNARY_CHUNK / 2);
    const scales = new Float32Array(chunks);
    const sent = new Uint8Array(size);
    for (let c = 0; c < chunks; c++) {
      const length = Math.min(TERNARY_CHUNK, size - c * TERNARY_CHUNK);
      const magnitude = (i) => Math.abs(flat[i]);
      const threshold = fround(treeSum(magnitude, size, c, TERNARY_CHUNK, level) * TERNARY_THRESHOLD / length);
      let count = 0;
      for (let i = c * TERNARY_CHUNK; i < c * TERNARY_CHUNK + length; i++) {
        sent[i] = Math.abs(flat[i]) > threshold ? 1 : 0;
        count += sent[i];
      }
      const total = treeSum((i) => (sent[i] ? Math.abs(flat[i]) : 0), size, c, TERNARY_CHUNK, level);
      scales[c] = count > 0 ? total / count : 0;
    }
    const negative = Uint8Array.from(flat, (value) => value < 0);
    const sentSigns = negative.filter((_, i) => sent[i]);
    const payload = new ByteWriter().float32s(scales).bytes(packBits(sent, size))
      .bytes(packBits(sentSigns, sentSigns.length)).finish();
    return { payload, decoded: signedScales(scales, TERNARY_CHUNK, negative, sent, size) };
  },
  decodeFlat(payload, size) {
    const reader = payloadReader(payload);
    const scales = reader.float32s(chunkCount(size, TERNARY_CHUNK));
    checkScales(scales, "ternary");
    const sent = unpackBits(reader.raw(Math.ceil(size / 8)), size, "ternary sent bitmap");
    const count = sent.reduce((total, flag) => total + flag, 0);
    const sentSigns = unpackBits(reader.raw(Math.ceil(count / 8)), count, "ternary signs");
    finish(reader);
    const negative = new Uint8Array(size);
    let next = 0;
    for (let i = 0; i < size; i++) if (sent[i]) negative[i] = sentSigns[next++];
    return signedScales(scales, TERNARY_CHUNK, negative, sent, size);
  },
};
