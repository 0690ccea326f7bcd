// Proves the opening of each sealed data key box given, with the browser worker's box_proof.js, and prints the
// proofs in hex: tests/console/browser_worker/test_bw_box_proof.py compares them with wallet/box_proofs.py's and
// has the chain's check (chain/box_proofs.py) judge them.
//
//   node prove_box.mjs '{"cases": [{"seed": "<hex>", "box": "<hex>"}, ...]}'

import { proveBoxOpening } from "../../../console/web/src/browser_worker/box_proof.js";

const { cases } = JSON.parse(process.argv[2]);
const fromHex = (hex) => Uint8Array.from(Buffer.from(hex, "hex"));
const proofs = [];
for (const { seed, box } of cases) {
  proofs.push(Buffer.from(await proveBoxOpening(fromHex(seed), fromHex(box))).toString("hex"));
}
console.log(JSON.stringify({ proofs }));
