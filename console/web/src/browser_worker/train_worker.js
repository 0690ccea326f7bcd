// The browser worker's Web Worker: trains rounds on the wasm32 kernel off the page's thread, so the page stays
// responsive and shows progress per segment. The .wasm when the browser has WebAssembly, else the kernel's
// JavaScript twin (the same bits, slower: docs/browser-worker.md).
//
// Messages in:   {type: "task", task, data, wasmUrl, useJs, cheat}        set up for a task's model and data
//                {type: "round", round, cheat}                             train one round (round_segments.js)
// Messages out:  {type: "ready", kernel: "wasm" | "js"}
//                {type: "checkpoint", index, step, bytes, hash, losses}    each checkpoint as it is made
//                {type: "done", segments}                                  the round is trained
//                {type: "error", message}

import { JsKernel, WasmKernel } from "../../../../compute/wasm/kernel.mjs";
import { prepareTask, trainRound } from "./round_segments.js";

let kernel = null;
let task = null;

/** The .wasm kernel, or the JavaScript one where WebAssembly is missing, asked against (`useJs`), or cannot
 * compile the kernel: it uses fixed-width SIMD, which engines before Chrome 91, Firefox 89 and Safari 16.4 lack.
 * Both give the same bits, so the fallback changes only the speed. */
async function loadKernel(wasmUrl, useJs) {
  if (useJs || typeof WebAssembly !== "object") return { kernel: new JsKernel(), kind: "js" };
  const bytes = await (await fetch(wasmUrl)).arrayBuffer();
  if (!WebAssembly.validate(bytes)) return { kernel: new JsKernel(), kind: "js" };
  return { kernel: await WasmKernel.load(bytes), kind: "wasm" };
}

async function handle(message) {
  if (message.type === "task") {
    const loaded = await loadKernel(message.wasmUrl, message.useJs);
    kernel = loaded.kernel;
    task = message.task;
    prepareTask(kernel, task, message.data, message.cheat ?? "");
    self.postMessage({ type: "ready", kernel: loaded.kind });
    return;
  }
  if (message.type === "round") {
    if (kernel === null) throw new Error("no task set up before a round");
    let segments = 0;
    for (const checkpoint of trainRound(kernel, task, message.round, message.cheat ?? "")) {
      self.postMessage({ type: "checkpoint", ...checkpoint });
      segments = checkpoint.index;
    }
    self.postMessage({ type: "done", segments });
    return;
  }
  throw new Error(`unknown message ${JSON.stringify(message.type)}`);
}

self.onmessage = async ({ data }) => {
  try {
    await handle(data);
  } catch (error) {
    self.postMessage({ type: "error", message: String(error?.message ?? error) });
  }
};
