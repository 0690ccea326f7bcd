// Loads a task's dataset with the browser worker's dataset.js (Node's own fetch) and prints the sha256 of each
// array it returns, or the error's class and message: tests/console/browser_worker/test_bw_dataset.py compares
// them with what Python hands the wasm32 kernel.
//
//   node load_dataset.mjs '{"spec": {...}, "dataKey": "<hex>" | null, "urls": [...]}'

import { loadDataset } from "../../../console/web/src/browser_worker/dataset.js";
import { sha256, toHex } from "../../../compute/wasm/sha256.mjs";

const bytesOf = (array) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
const { spec, dataKey, urls } = JSON.parse(process.argv[2]);
const key = dataKey ? Uint8Array.from(Buffer.from(dataKey, "hex")) : null;
try {
  const data = await loadDataset(spec, { dataKey: key, urls: urls ?? [] });
  console.log(JSON.stringify({
    ok: true,
    train_inputs: toHex(sha256(bytesOf(data.trainInputs))), train_targets: toHex(sha256(bytesOf(data.trainTargets))),
    test_inputs: toHex(sha256(bytesOf(data.testInputs))), test_targets: toHex(sha256(bytesOf(data.testTargets))),
    train_count: data.trainCount, test_count: data.testCount, input_size: data.inputSize,
    num_classes: data.numClasses, types: [data.trainInputs, data.trainTargets, data.testInputs, data.testTargets]
      .map((array) => array.constructor.name),
  }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: error.name, classes: classChain(error), message: error.message }));
}

function classChain(error) {
  const names = [];
  for (let proto = Object.getPrototypeOf(error); proto && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    names.push(proto.constructor.name);
  }
  return names;
}
