// node tests/compute/wasm/run_vector.mjs <vector.json> wasm|js: the vector's segment trained by Node.js, with
// compute/wasm/kernel.wasm or the JavaScript fallback; prints {kind, hash, losses} as JSON.

import { readFileSync } from "node:fs";
import { runVector } from "./vector.mjs";

const [vectorPath, kind] = process.argv.slice(2);
const vector = JSON.parse(readFileSync(vectorPath, "utf8"));
const wasm = readFileSync(new URL("../../../compute/wasm/kernel.wasm", import.meta.url));
console.log(JSON.stringify(await runVector(vector, kind, wasm)));
