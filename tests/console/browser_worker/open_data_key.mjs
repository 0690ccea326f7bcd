// Opens a data key box with the browser worker's data_key.js against a fake node that answers the paths given
// (a path it lacks is the chain's NotFound, code 11), and prints the key in hex, null, or the error's class and
// message: tests/console/browser_worker/test_bw_data_key.py seals the boxes with the wallet's Python code.
//
//   node open_data_key.mjs '{"answers": {path: answer}, "taskId": 7, "seed": "<hex>", "address": "trolly1..."}'

import { dataKeyHash, openDataKey } from "../../../console/web/src/browser_worker/data_key.js";

const { answers, taskId, seed, address, committedHash, hashOf } = JSON.parse(process.argv[2]);
const fromHex = (hex) => Uint8Array.from(Buffer.from(hex, "hex"));
const node = {
  async query(path) {
    if (!(path in answers)) throw Object.assign(new Error(`${path}: not found`), { code: 11 });
    return answers[path];
  },
};
try {
  const key = await openDataKey(node, taskId, { seed: fromHex(seed), address }, { committedHash });
  console.log(JSON.stringify({ ok: true, key: key && Buffer.from(key).toString("hex"),
    hash: hashOf ? dataKeyHash(fromHex(hashOf)) : null }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: error.name, message: error.message }));
}
