// Prints the browser worker's `datasetUrls(spec, task)` for the spec and chain answer given:
// tests/console/browser_worker/test_bw_dataset.py compares it with compute/data/fetch.py's `dataset_urls`.
//
//   node dataset_urls.mjs '{"spec": {...}, "task": {...}}'

import { datasetUrls } from "../../../console/web/src/browser_worker/dataset.js";

const { spec, task } = JSON.parse(process.argv[2]);
console.log(JSON.stringify(datasetUrls(spec, task)));
