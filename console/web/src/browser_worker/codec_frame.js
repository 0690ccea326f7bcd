// The framing every encoded update shares (compute/codecs/base.py), and the codec error:
//
//   magic "TRCU"  version u8 = 1  codec_name_length u8  codec_name  count u32
//   count x (name_length u16, name, ndim u8, ndim x dim u64)      ascending name order (UTF-8 bytes)
//   payload (codec specific: codecs_dense.js, codecs_topk.js)
//
// Tensors are Maps name -> {shape, data: Float32Array}; the flat vector is their data in that order.

import { ByteReader, ByteWriter, sortedByBytes, utf8 } from "./bytes.js";

const MAGIC = "TRCU";
const VERSION = 1;
const MAX_TENSORS = 4096;

/** An update that cannot be encoded or decoded (compute/errors.py's CodecError). */
export class CodecError extends Error {
  constructor(message) {
    super(message);
    this.name = "CodecError";
  }
}

function product(shape) {
  return shape.reduce((total, size) => total * size, 1);
}

/** The header of an update of `tensors` under `codecName`, and their layout [{name, shape, size}] in order. */
export function frame(codecName, tensors) {
  const names = sortedByBytes([...tensors.keys()]);
  if (names.length > MAX_TENSORS) throw new CodecError(`too many tensors (${names.length})`);
  const out = new ByteWriter().bytes(utf8(MAGIC)).u8(VERSION).u8(codecName.length).bytes(utf8(codecName));
  out.u32(names.length);
  const layout = [];
  for (const name of names) {
    const { shape } = tensors.get(name);
    const nameBytes = utf8(name);
    out.u16(nameBytes.length).bytes(nameBytes).u8(shape.length);
    shape.forEach((size) => out.u64(size));
    layout.push({ name, shape: [...shape], size: product(shape) });
  }
  return { header: out.finish(), layout };
}

/** The tensors' values in layout order as one Float32Array; CodecError naming the first one not all finite. */
export function flatten(tensors, layout) {
  const flat = new Float32Array(layout.reduce((total, { size }) => total + size, 0));
  let at = 0;
  for (const { name, size } of layout) {
    const { data } = tensors.get(name);
    for (let i = 0; i < size; i++) {
      if (!Number.isFinite(data[i])) throw new CodecError(`'${name}' has NaN or infinite values`);
    }
    flat.set(data.subarray(0, size), at);
    at += size;
  }
  return flat;
}

/** Named tensors (views of `flat`) laid out as `layout` says. */
export function unflatten(flat, layout) {
  const tensors = new Map();
  let at = 0;
  for (const { name, shape, size } of layout) {
    tensors.set(name, { dtype: "float32", shape, data: flat.subarray(at, at + size) });
    at += size;
  }
  return tensors;
}

/** The layout an update's header declares and a reader at its payload; CodecError when it is malformed or was
 * encoded with another codec than `codecName`. */
export function readFrame(bytes, codecName) {
  const reader = new ByteReader(bytes, () => { throw new CodecError("malformed update header: too short"); });
  if (new TextDecoder().decode(reader.raw(4)) !== MAGIC) throw new CodecError("not an encoded update (bad magic)");
  const version = reader.u8();
  if (version !== VERSION) throw new CodecError(`unsupported update version ${version}`);
  const name = new TextDecoder().decode(reader.raw(reader.u8()));
  if (name !== codecName) throw new CodecError(`update was encoded with '${name}', not '${codecName}'`);
  const count = reader.u32();
  if (count > MAX_TENSORS) throw new CodecError(`too many tensors (${count})`);
  const layout = [];
  const decoder = new TextDecoder("utf-8", { fatal: true });
  for (let t = 0; t < count; t++) {
    let tensorName;
    try {
      tensorName = decoder.decode(reader.raw(reader.u16()));
    } catch (error) {
      if (error instanceof CodecError) throw error;
      throw new CodecError("malformed update header: a name is not UTF-8");
    }
    const ndim = reader.u8();
    const shape = [];
    for (let d = 0; d < ndim; d++) shape.push(reader.u64());
    if (shape.some((size) => size > 2n ** 31n)) throw new CodecError(`update tensor '${tensorName}' is too large`);
    const dims = shape.map(Number);
    layout.push({ name: tensorName, shape: dims, size: product(dims) });
  }
  const names = layout.map(({ name }) => name);
  if (sortedByBytes(names).some((name, i) => name !== names[i])) {
    throw new CodecError("update tensors are not in canonical order");
  }
  const total = layout.reduce((sum, { size }) => sum + size, 0);
  if (layout.some(({ size }) => size > 2 ** 31) || total > 2 ** 31) {
    throw new CodecError(`update declares ${total} elements, too many`);
  }
  return { layout, total, payload: bytes.subarray(reader.offset) };
}

/** A reader over a payload whose short end is the codecs' "truncated" error. */
export function payloadReader(payload) {
  return new ByteReader(payload, () => { throw new CodecError("update payload is truncated"); });
}

/** CodecError unless the payload was read to its end. */
export function finish(reader) {
  if (reader.left !== 0) throw new CodecError(`${reader.left} unexpected bytes after the update payload`);
}
