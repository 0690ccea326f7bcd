// A Web Worker that trains a test vector (the browser worker trains in one): posted {vector, kind, wasmUrl},
// it answers runVector's {kind, hash, losses}, or {error}.

import { runVector } from "./vector.mjs";

self.onmessage = async ({ data: { vector, kind, wasmUrl } }) => {
  try {
    const wasm = kind === "wasm" ? await (await fetch(wasmUrl)).arrayBuffer() : null;
    self.postMessage(await runVector(vector, kind, wasm));
  } catch (error) {
    self.postMessage({ error: String(error) });
  }
};
