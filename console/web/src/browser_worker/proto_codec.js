// Protobuf encoding of the chain's messages, byte for byte as Python's generated code writes them
// (`SerializeToString(deterministic=True)`): fields in field-number order, proto3 defaults (0, "", empty
// bytes, false) left out, a sub-message written whenever it is given. The types come from the committed
// descriptor of chain/proto/*.proto (proto_descriptor.js, made by console/web/scripts/proto_descriptor.mjs),
// read by protobufjs's light build.
//
// Values are checked against their field's type before encoding, so a page cannot sign something other than
// it meant: uint64 as a BigInt, a safe non-negative integer or a decimal string (amounts reach 2^64 - 1,
// beyond a JS number's exact range); uint32 as an integer; bytes as a Uint8Array or hex text; strings as
// strings. An unknown field name or a wrong value is an EncodingError naming the field.
import protobuf from "protobufjs/light.js";

import { fromHex } from "./bytes_text.js";
import { EncodingError } from "./chain_errors.js";
import descriptor from "./proto_descriptor.js";

const ROOT = protobuf.Root.fromJSON(descriptor);
const U64_MAX = (1n << 64n) - 1n;
const U32_MAX = 2 ** 32 - 1;

/** The protobufjs type of a full name such as `trolly.tx.v1.TxBody`. */
export function protoType(fullName) {
  return ROOT.lookupType(fullName);
}

/** The type URL the chain dispatches on: "/" + the message's full name. */
export function typeUrlOf(fullName) {
  return "/" + protoType(fullName).fullName.replace(/^\./, "");
}

/** The canonical bytes of message `fullName` with `values` (field names as in the .proto file). */
export function encodeMessage(fullName, values) {
  const type = protoType(fullName);
  return type.encode(checkedMessage(type, values, type.name)).finish();
}

function checkedMessage(type, values, where) {
  if (values === null || typeof values !== "object" || values instanceof Uint8Array) {
    throw new EncodingError(`${where} must be an object of fields, got ${describe(values)}`);
  }
  const checked = {};
  for (const [name, value] of Object.entries(values)) {
    const field = type.fields[name];
    if (field === undefined) {
      throw new EncodingError(`${type.name} has no field ${name}; its fields: ${Object.keys(type.fields).join(", ")}`);
    }
    if (value === undefined || value === null) {
      continue; // left out, as an unset field
    }
    const path = `${where}.${name}`;
    checked[name] = field.repeated
      ? checkedList(field, value, path)
      : checkedValue(field, value, path);
  }
  return checked;
}

function checkedList(field, value, path) {
  if (!Array.isArray(value)) {
    throw new EncodingError(`${path} must be a list, got ${describe(value)}`);
  }
  return value.map((item, index) => checkedValue(field, item, `${path}[${index}]`));
}

function checkedValue(field, value, path) {
  field.resolve();
  if (field.resolvedType instanceof protobuf.Type) {
    return checkedMessage(field.resolvedType, value, path);
  }
  switch (field.type) {
    case "uint64":
      return uint64(value, path);
    case "uint32":
      return uint32(value, path);
    case "string":
      if (typeof value !== "string") {
        throw new EncodingError(`${path} must be a string, got ${describe(value)}`);
      }
      return value;
    case "bytes":
      return bytes(value, path);
    case "bool":
      if (typeof value !== "boolean") {
        throw new EncodingError(`${path} must be true or false, got ${describe(value)}`);
      }
      return value;
    default:
      throw new EncodingError(`${path}: fields of type ${field.type} are not encoded by the browser worker`);
  }
}

/** A uint64 as protobufjs's {low, high} bits, exact over the whole range. */
export function uint64(value, path = "value") {
  const big = exactInteger(value, path);
  if (big < 0n || big > U64_MAX) {
    throw new EncodingError(`${path} must be in 0..${U64_MAX}, got ${big}`);
  }
  return { low: Number(big & 0xffffffffn) | 0, high: Number(big >> 32n) | 0, unsigned: true };
}

function uint32(value, path) {
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new EncodingError(`${path} must be an integer in 0..${U32_MAX}, got ${describe(value)}`);
  }
  return value;
}

/** An integer given as a BigInt, a safe integer number or a decimal string, as a BigInt. */
export function exactInteger(value, path = "value") {
  if (typeof value === "bigint") {
    return value;
  }
  if (typeof value === "number" && Number.isSafeInteger(value)) {
    return BigInt(value);
  }
  if (typeof value === "string" && /^[0-9]{1,20}$/.test(value)) {
    return BigInt(value);
  }
  const hint = typeof value === "number" && Number.isInteger(value)
    ? " (beyond a JS number's exact range: pass a BigInt or a decimal string)" : "";
  throw new EncodingError(`${path} must be a whole number, got ${describe(value)}${hint}`);
}

function bytes(value, path) {
  if (value instanceof Uint8Array) {
    return value;
  }
  const decoded = fromHex(value);
  if (decoded === null) {
    throw new EncodingError(`${path} must be a Uint8Array or hex text, got ${describe(value)}`);
  }
  return decoded;
}

function describe(value) {
  if (typeof value === "bigint") {
    return `${value}n`;
  }
  if (value instanceof Uint8Array) {
    return `${value.length} bytes`;
  }
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 60)}...` : text;
}
