// Bytes as text and back: base64 (what CometBFT's JSON-RPC and the key files carry) and hex (hashes).
// Strict readers: text that is not exactly the encoding gives null, so each caller refuses it with its own
// words instead of reading something else than was meant.

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const HEX = /^(?:[0-9a-fA-F]{2})*$/;

/** Standard base64 with padding of `bytes`. */
export function toBase64(bytes) {
  let text = "";
  for (let start = 0; start < bytes.length; start += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(start, start + 0x8000));
  }
  return btoa(text);
}

/** The bytes of standard padded base64 (what Python's b64decode(validate=True) accepts), null otherwise. */
export function fromBase64(text) {
  if (typeof text !== "string" || !BASE64.test(text)) {
    return null;
  }
  return Uint8Array.from(atob(text), (char) => char.charCodeAt(0));
}

/** Lower-case hex of `bytes`. */
export function toHex(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** The bytes of an even-length hex string (either case), null otherwise. */
export function fromHex(text) {
  if (typeof text !== "string" || !HEX.test(text)) {
    return null;
  }
  return Uint8Array.from(text.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}
