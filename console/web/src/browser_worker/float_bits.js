// Float conversions the codecs need, each exactly as numpy does it: round half to even (`np.rint`), float32 to
// IEEE half with round to nearest even (`astype("<f2")`) and back.

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** `np.rint`: the nearest integer, ties to even. */
export function rint(value) {
  const rounded = Math.round(value); // ties towards +infinity
  return rounded - value === 0.5 && rounded % 2 !== 0 ? rounded - 1 : rounded;
}

/** The IEEE half bits of a float32 value (numpy's conversion: round to nearest even; beyond half's range:
 * infinity). */
export function toHalfBits(value) {
  F32[0] = value;
  const bits = U32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  const mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0); // infinity, NaN
  const halfExponent = exponent - 112; // 127 - 15
  if (halfExponent >= 31) return sign | 0x7c00;
  if (halfExponent <= 0) { // a half subnormal (or zero): units of 2^-24
    if (halfExponent < -10) return sign;
    const full = mantissa | 0x800000;
    const shift = 14 - halfExponent;
    return sign | roundShift(full, shift);
  }
  return sign | roundShift((halfExponent << 23) | mantissa, 13); // a carry moves into the exponent, as it should
}

function roundShift(value, shift) {
  const kept = value >>> shift;
  const rest = value - kept * 2 ** shift;
  const half = 2 ** (shift - 1);
  return rest > half || (rest === half && kept % 2 === 1) ? kept + 1 : kept;
}

/** The float32 value of IEEE half bits (exact). */
export function fromHalfBits(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 31) return mantissa ? NaN : sign * Infinity;
  return sign * (1024 + mantissa) * 2 ** (exponent - 25);
}
