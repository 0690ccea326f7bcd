// node tests/compute/wasm/compare_kernels.mjs: the JavaScript fallback against the .wasm, bit for bit, beyond
// the one vector. exp and log on every kind of float32 (random bit patterns, the edges of their ranges), the
// lr schedule, the batch order, and whole steps of random models, data and hyperparameters, comparing every
// float of the state after every step. Prints {checked: {...}} as JSON, or the first difference and exits 1.

import { readFileSync } from "node:fs";
import { JsKernel, WasmKernel, exp32, log32 } from "../../../compute/wasm/kernel.mjs";

const wasmBytes = readFileSync(new URL("../../../compute/wasm/kernel.wasm", import.meta.url));
const probe = (await WebAssembly.instantiate(wasmBytes, {})).instance.exports;

let state = 0x2545f491n; // xorshift64*: the comparison's own inputs, reproducible
function random() {
  state ^= state >> 12n; state ^= (state << 25n) & 0xffffffffffffffffn; state ^= state >> 27n;
  return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
}
const pick = (low, high) => low + Math.floor(random() * (high - low + 1));

function fail(what) {
  console.log(JSON.stringify({ difference: what }));
  process.exit(1);
}

const floatOfBits = (bits) => new Float32Array(new Uint32Array([bits]).buffer)[0];
const bitsOf = (value) => new Uint32Array(new Float32Array([value]).buffer)[0];
const same = (a, b) => bitsOf(a) === bitsOf(b);

function compareMath() {
  const inputs = [0, -0, -1e-45, -86, -86.00001, -85.99999, -88, -0.5, -0.34657359, 1, 3, 10, 1e-38, 1.17549435e-38,
    3.4028234663852886e38, Infinity, -Infinity, NaN];
  for (let i = 0; i < 200000; i++) inputs.push(floatOfBits(Math.floor(random() * 2 ** 32)));
  for (let i = 0; i < 200000; i++) inputs.push(-random() * 90, 1 + random() * 20);
  for (const x of inputs) {
    if (!same(exp32(x), probe.kernel_exp(x)) ) fail(`exp(${x})`);
    if (!same(log32(x), probe.kernel_log(x))) fail(`log(${x})`);
  }
  return inputs.length;
}

function kernels(sizes, batchSize, count) {
  const inputs = new Float32Array(count * sizes[0]).map(() => (random() < 0.3 ? 0 : (random() - 0.3) * 4));
  const targets = new Uint32Array(count).map(() => pick(0, sizes[sizes.length - 1] - 1));
  const schedule = [random() < 0.1 ? 1e35 : random() * 0.05, pick(0, 2), pick(0, 6), random() * 0.001, pick(1, 4), pick(1, 10)];
  const optimizer = [0.8 + random() * 0.19, 0.9 + random() * 0.0999, 10 ** -pick(4, 10), random() < 0.5 ? 0 : random() * 0.2];
  const stream = [BigInt(Math.floor(random() * 2 ** 53)) * 1024n, pick(0, 1000), pick(0, 3)];
  return async (kernel) => {
    kernel.configure(sizes, batchSize);
    kernel.setData(inputs, targets);
    kernel.setOptimizer(...optimizer);
    kernel.setSchedule(...schedule);
    kernel.setStream(...stream);
    return kernel;
  };
}

async function compareTraining(models) {
  let steps = 0;
  let nans = 0;
  for (let model = 0; model < models; model++) {
    const layers = pick(1, 4);
    const sizes = Array.from({ length: layers + 1 }, () => pick(1, 40));
    sizes[layers] = pick(2, 12);
    const setUp = kernels(sizes, pick(1, 20), pick(1, 60));
    const js = await setUp(new JsKernel());
    const wasm = await setUp(await WasmKernel.load(wasmBytes));
    const weights = new Float32Array(js.params).map(() => (random() - 0.5) * (random() < 0.1 ? 8 : 0.8));
    const start = { weights, expAvg: new Float32Array(js.params), expAvgSq: new Float32Array(js.params), adamStep: 0 };
    js.load(start);
    wasm.load(start);
    for (let round = 0; round < 2; round++) {
      for (let step = 0; step < pick(1, 12); step++, steps++) {
        if (js.innerLr(round, step) !== wasm.innerLr(round, step)) fail(`lr of model ${model} step ${step}`);
        const [a, b] = [js.batch(step), wasm.batch(step)];
        if (a.join() !== b.join()) fail(`batch of model ${model} step ${step}`);
        const [lossJs, lossWasm] = [js.trainStep(step), wasm.trainStep(step)];
        if (!same(lossJs, lossWasm)) fail(`loss of model ${model} step ${step}: ${lossJs} ${lossWasm}`);
        const [left, right] = [js.state(), wasm.state()];
        for (const part of ["weights", "expAvg", "expAvgSq"]) {
          const [x, y] = [new Uint32Array(left[part].buffer), new Uint32Array(right[part].buffer)];
          for (let k = 0; k < x.length; k++) if (x[k] !== y[k]) fail(`${part}[${k}] of model ${model} step ${step}`);
          nans += left[part].filter(Number.isNaN).length;
        }
      }
    }
  }
  return { steps, nans };
}

const models = Number(process.argv[2] || 60);
console.log(JSON.stringify({ checked: { mathInputs: compareMath(), models, ...await compareTraining(models) } }));
