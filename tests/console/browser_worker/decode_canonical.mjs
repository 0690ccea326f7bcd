// Decodes each byte string of a JSON file (a list of hex strings) with the browser worker's canonical.js and
// prints, per string, the tensors (name, dtype, shape, sha256 of the little-endian data) and whether encoding
// them again gives the same bytes, or the refusal's message: tests/console/browser_worker/test_bw_canonical.py
// compares each with compute/canonical.py.
//
//   node decode_canonical.mjs '{"file": "/tmp/.../cases.json"}'

import { readFileSync } from "node:fs";
import { CanonicalError, decodeTensors, encodeTensors } from "../../../console/web/src/browser_worker/canonical.js";
import { sha256, toHex } from "../../../compute/wasm/sha256.mjs";

const cases = JSON.parse(readFileSync(JSON.parse(process.argv[2]).file, "utf-8"));
const results = cases.map((hex) => {
  const bytes = Uint8Array.from(Buffer.from(hex, "hex"));
  let tensors;
  try {
    tensors = decodeTensors(bytes);
  } catch (error) {
    if (!(error instanceof CanonicalError)) throw error;
    return { ok: false, message: error.message };
  }
  const again = toHex(encodeTensors(tensors)) === hex;
  const listed = [...tensors].map(([name, { dtype, shape, data }]) => [name, dtype, shape,
    toHex(sha256(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)))]);
  return { ok: true, tensors: listed, again };
});
console.log(JSON.stringify(results));
