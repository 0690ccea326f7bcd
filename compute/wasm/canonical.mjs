// Canonical tensor bytes in JavaScript: compute/canonical.py's format, both ways. A browser worker hashes its
// checkpoints in it (checkpoint.mjs) and reads its dataset's shards from it (console/web/src/browser_worker/).
//
//   magic "TRLT"  version u8 = 1  count u32, then per entry in ascending byte order of name:
//   name_length u16  name (UTF-8)  dtype u8  ndim u8  ndim x dim u64  data (row-major, little-endian)
//
//   encodeTensors(new Map([[name, {dtype: "float32", shape: [2, 3], bytes}]]))   // Uint8Array
//   decodeTensors(bytes)   // Map name -> {dtype, shape, bytes, data}; CanonicalError for anything Python refuses
//
// Decoding is as strict as Python's `read_entries`, check for check and in the same order, so that a shard one
// side reads the other reads too, and decode(encode(x)) is the only way to reach a given byte string.

const MAGIC = [0x54, 0x52, 0x4c, 0x54]; // "TRLT"
const VERSION = 1;
const MAX_DIMS = 8;
/** Largest element count a tensor's non-zero dimensions may multiply to (Python's numpy index range). */
const MAX_ELEMENTS = 2n ** 31n;

/** Each dtype's code in the bytes (compute/canonical.py's DTYPE_CODES), element size and typed array. Float16
 * has no typed array in Node.js 20: its data is the raw bits, a Uint16Array. */
export const DTYPES = {
  float32: { code: 1, size: 4, array: Float32Array },
  float16: { code: 2, size: 2, array: Uint16Array },
  float64: { code: 3, size: 8, array: Float64Array },
  int64: { code: 4, size: 8, array: BigInt64Array },
  int32: { code: 5, size: 4, array: Int32Array },
  uint8: { code: 6, size: 1, array: Uint8Array },
  int8: { code: 7, size: 1, array: Int8Array },
};
const BY_CODE = new Map(Object.entries(DTYPES).map(([name, dtype]) => [dtype.code, { name, ...dtype }]));
const STRICT = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const LENIENT = new TextDecoder("utf-8", { ignoreBOM: true }); // messages: errors="replace"; a BOM is a character, as in Python
const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Bytes that are not canonical tensor bytes, with the reason Python's `EncodingError` gives. */
export class CanonicalError extends Error {
  constructor(message) {
    super(message);
    this.name = "CanonicalError";
  }
}

function compareBytes(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

/** The canonical bytes of `named`: Map (or object) name -> {dtype (a DTYPES name), shape, bytes (little-endian
 * data, row-major)}, in ascending byte order of the names whatever the order given. */
export function encodeTensors(named) {
  const encoder = new TextEncoder();
  const entries = [...(named instanceof Map ? named : Object.entries(named))]
    .map(([name, tensor]) => ({ nameBytes: encoder.encode(name), ...tensor }))
    .sort((a, b) => compareBytes(a.nameBytes, b.nameBytes));
  const header = new DataView(new ArrayBuffer(9));
  MAGIC.forEach((byte, i) => header.setUint8(i, byte));
  header.setUint8(4, VERSION);
  header.setUint32(5, entries.length, true);
  const pieces = [new Uint8Array(header.buffer)];
  for (const { nameBytes, dtype, shape, bytes } of entries) {
    if (!(dtype in DTYPES)) throw new CanonicalError(`dtype ${dtype} has no canonical code`);
    const entry = new DataView(new ArrayBuffer(2 + nameBytes.length + 2 + 8 * shape.length));
    entry.setUint16(0, nameBytes.length, true);
    new Uint8Array(entry.buffer).set(nameBytes, 2);
    entry.setUint8(2 + nameBytes.length, DTYPES[dtype].code);
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

/** A reader over the bytes that fails as Python's struct.error does when a field runs past the end. */
class Reader {
  constructor(bytes) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.offset = 0;
  }

  need(count) {
    if (this.offset + count > this.bytes.length) {
      throw new CanonicalError(`truncated canonical tensor bytes: ${count} bytes needed at offset ${this.offset}`);
    }
  }

  u8() {
    this.need(1);
    return this.view.getUint8(this.offset++);
  }

  u16() {
    this.need(2);
    const value = this.view.getUint16(this.offset, true);
    this.offset += 2;
    return value;
  }

  u64() {
    this.need(8);
    const value = this.view.getBigUint64(this.offset, true);
    this.offset += 8;
    return value;
  }
}

/** The data of one entry as a typed array of its own (aligned, native order). */
function typedData(dtype, bytes, count) {
  const copy = bytes.slice();
  if (!LITTLE_ENDIAN_HOST && dtype.size > 1) {
    for (let i = 0; i < copy.length; i += dtype.size) copy.subarray(i, i + dtype.size).reverse();
  }
  return new dtype.array(copy.buffer, 0, count);
}

function readEntry(reader, previous) {
  const nameLength = reader.u16();
  const nameBytes = reader.bytes.subarray(reader.offset, reader.offset + nameLength);
  if (nameBytes.length !== nameLength) throw new CanonicalError("truncated tensor name");
  reader.offset += nameLength;
  if (previous !== null && compareBytes(nameBytes, previous) <= 0) {
    throw new CanonicalError("tensor names are not in strictly ascending order");
  }
  const code = reader.u8();
  const ndim = reader.u8();
  const dtype = BY_CODE.get(code);
  if (dtype === undefined) throw new CanonicalError(`unknown dtype code ${code}`);
  if (ndim > MAX_DIMS) throw new CanonicalError(`too many dimensions (${ndim})`);
  const shape = [];
  for (let i = 0; i < ndim; i++) shape.push(reader.u64());
  const shown = () => LENIENT.decode(nameBytes);
  if (shape.filter((size) => size !== 0n).reduce((a, b) => a * b, 1n) > MAX_ELEMENTS) {
    throw new CanonicalError(`tensor '${shown()}' declares the shape [${shape.join(", ")}], too large`);
  }
  const count = shape.reduce((a, b) => a * b, 1n);
  const size = Number(count) * dtype.size;
  if (reader.offset + size > reader.bytes.length) throw new CanonicalError(`truncated data for tensor '${shown()}'`);
  const bytes = reader.bytes.subarray(reader.offset, reader.offset + size);
  reader.offset += size;
  let name;
  try {
    name = STRICT.decode(nameBytes);
  } catch {
    throw new CanonicalError("tensor name is not valid UTF-8");
  }
  return { name, nameBytes, dtype, shape: shape.map(Number), bytes, count: Number(count) };
}

/** The tensors in canonical bytes, in their order: Map name -> {dtype (a DTYPES name), shape (numbers), bytes
 * (a view of the input), data (a typed array copy)}. CanonicalError for every deviation Python's
 * `read_entries` refuses: bad magic or version, a count the bytes cannot hold, names out of order or not UTF-8,
 * an unknown dtype, more than 8 dimensions, a shape past 2^31 elements, truncation, trailing bytes. */
export function decodeTensors(input) {
  const bytes = input instanceof Uint8Array ? input : new Uint8Array(input);
  if (bytes.length < 9 || MAGIC.some((byte, i) => bytes[i] !== byte)) {
    throw new CanonicalError("not canonical tensor bytes (bad magic)");
  }
  const reader = new Reader(bytes);
  reader.offset = 4;
  const version = reader.u8();
  if (version !== VERSION) throw new CanonicalError(`unsupported canonical tensor version ${version}`);
  const count = reader.view.getUint32(5, true);
  reader.offset = 9;
  if (count > Math.floor(bytes.length / 4)) {
    throw new CanonicalError(`declares ${count} tensors in ${bytes.length} bytes`);
  }
  const entries = [];
  let previous = null;
  for (let i = 0; i < count; i++) {
    const entry = readEntry(reader, previous);
    previous = entry.nameBytes;
    entries.push(entry);
  }
  if (reader.offset !== bytes.length) {
    throw new CanonicalError(`${bytes.length - reader.offset} trailing bytes after the last tensor`);
  }
  const tensors = new Map();
  for (const { name, dtype, shape, bytes: data, count: elements } of entries) {
    tensors.set(name, { dtype: dtype.name, shape, bytes: data, data: typedData(dtype, data, elements) });
  }
  return tensors;
}
