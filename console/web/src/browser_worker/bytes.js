// Little-endian byte building and reading for the protocol's binary formats (canonical tensors, encoded
// updates): whatever the host's byte order, the bytes are the ones compute/canonical.py and compute/codecs write.

const ENCODER = new TextEncoder();

/** UTF-8 bytes of a string. */
export function utf8(text) {
  return ENCODER.encode(text);
}

/** Names in ascending order of their UTF-8 bytes (Python's `sorted(key=lambda n: n.encode())`). */
export function sortedByBytes(names) {
  const keyed = names.map((name) => [utf8(name), name]);
  keyed.sort(([a], [b]) => {
    for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
    return a.length - b.length;
  });
  return keyed.map(([, name]) => name);
}

/** Pieces appended in order, joined once. */
export class ByteWriter {
  constructor() {
    this.pieces = [];
    this.length = 0;
  }

  bytes(array) {
    this.pieces.push(array);
    this.length += array.length;
    return this;
  }

  scalar(size, write) {
    const view = new DataView(new ArrayBuffer(size));
    write(view);
    return this.bytes(new Uint8Array(view.buffer));
  }

  u8(value) { return this.scalar(1, (v) => v.setUint8(0, value)); }
  u16(value) { return this.scalar(2, (v) => v.setUint16(0, value, true)); }
  u32(value) { return this.scalar(4, (v) => v.setUint32(0, value, true)); }
  u64(value) { return this.scalar(8, (v) => v.setBigUint64(0, BigInt(value), true)); }

  /** float32 values, little-endian. */
  float32s(values) {
    const view = new DataView(new ArrayBuffer(values.length * 4));
    for (let i = 0; i < values.length; i++) view.setFloat32(4 * i, values[i], true);
    return this.bytes(new Uint8Array(view.buffer));
  }

  /** uint16 values, little-endian. */
  uint16s(values) {
    const view = new DataView(new ArrayBuffer(values.length * 2));
    for (let i = 0; i < values.length; i++) view.setUint16(2 * i, values[i], true);
    return this.bytes(new Uint8Array(view.buffer));
  }

  /** int8 values as their bytes. */
  int8s(values) {
    return this.bytes(new Uint8Array(values.buffer, values.byteOffset, values.length).slice());
  }

  finish() {
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const piece of this.pieces) {
      out.set(piece, at);
      at += piece.length;
    }
    return out;
  }
}

/** Reads a byte array from the front; `short()` is called (and must throw) when it ends too early. */
export class ByteReader {
  constructor(bytes, short) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.offset = 0;
    this.short = short;
  }

  get left() {
    return this.bytes.length - this.offset;
  }

  take(size) {
    if (size > this.left) this.short();
    const at = this.offset;
    this.offset += size;
    return at;
  }

  u8() { return this.view.getUint8(this.take(1)); }
  u16() { return this.view.getUint16(this.take(2), true); }
  u32() { return this.view.getUint32(this.take(4), true); }
  u64() { return this.view.getBigUint64(this.take(8), true); }
  raw(size) { const at = this.take(size); return this.bytes.subarray(at, at + size); }

  float32s(count) {
    const at = this.take(4 * count);
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = this.view.getFloat32(at + 4 * i, true);
    return out;
  }

  uint16s(count) {
    const at = this.take(2 * count);
    const out = new Uint16Array(count);
    for (let i = 0; i < count; i++) out[i] = this.view.getUint16(at + 2 * i, true);
    return out;
  }

  int8s(count) {
    const at = this.take(count);
    return new Int8Array(this.bytes.buffer.slice(this.bytes.byteOffset + at, this.bytes.byteOffset + at + count));
  }
}
