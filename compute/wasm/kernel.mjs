// The wasm32 training kernel in JavaScript: kernel.c's arithmetic, operation for operation, and the same
// interface over the .wasm itself. Runs in Node.js, in a page and in a Web Worker (an ES module, no imports).
//
//   const kernel = useWasm ? await WasmKernel.load(wasmBytes) : new JsKernel();
//   kernel.configure([64, 32, 10], 32);
//   kernel.setData(inputs, targets);               // Float32Array (count * 64), Uint32Array (count)
//   kernel.setOptimizer(0.9, 0.999, 1e-8, 0.0);
//   kernel.setSchedule(lr, kind, warmup, finalLr, rounds, innerSteps);
//   kernel.load({weights, expAvg, expAvgSq, adamStep});
//   kernel.setStream(seed, worker, round);          // numbers or BigInts, each in [0, 2**64)
//   const loss = kernel.trainStep(step);
//   const state = kernel.state();                   // copies: {weights, expAvg, expAvgSq, adamStep}
//
// Why JsKernel gives the wasm's bits: every float32 operation of kernel.c (+ - * / and sqrt, each rounded to
// nearest) is done here in double and rounded to float32 with Math.fround, which gives the correctly rounded
// float32 result (a double holds more than twice float32's precision, so the double rounding is innocuous);
// the doubles of the schedule and of AdamW's scalars are the same IEEE operations in the same order; floor,
// comparisons and bit moves are exact. The constants below are the exact values of kernel.c's literals.
// docs/browser-worker.md has the rules both follow.

export const KERNEL_VERSION = 1;
export const PROFILE_ID = `wasm32/kernel-${KERNEL_VERSION}`;
export const SCHEDULE_KINDS = { constant: 0, linear: 1, cosine: 2 };

const f = Math.fround;
const FLT_MIN_NORMAL = 1.1754943508222875e-38;
const FLT_MAX = 3.4028234663852886e38;
const CANONICAL_NAN = 0x7fc00000;
const LOG2E = 1.4426950216293335;
const LN2_HI = 0.693145751953125;
const LN2_LO = 1.428606765330187e-06;
const EXP_TERMS = [1.9841270113829523e-04, 1.3888889225199819e-03, 8.333333767950535e-03, 4.16666679084301e-02,
  1.666666716337204e-01, 0.5, 1.0, 1.0];
const SQRT2 = 1.4142135381698608;
const LOG_TERMS = [1.111111119389534e-01, 1.428571492433548e-01, 2.0000000298023224e-01, 3.333333432674408e-01, 1.0];
const COSINE_COEFFICIENTS = [1.0, -0.5, 0.041666666666666664, -0.001388888888888889, 2.48015873015873e-05,
  -2.755731922398589e-07, 2.08767569878681e-09, -1.1470745597729725e-11, 4.779477332387385e-14,
  -1.5619206968586225e-16, 4.110317623312165e-19, -8.896791392450574e-22, 1.6117375710961184e-24,
  -2.4795962632247976e-27];

const scratch = new ArrayBuffer(4);
const scratchFloat = new Float32Array(scratch);
const scratchBits = new Uint32Array(scratch);

function bitsToFloat(bits) {
  scratchBits[0] = bits;
  return scratchFloat[0];
}

function floatToBits(value) {
  scratchFloat[0] = value;
  return scratchBits[0];
}

/** e^x for x <= 0, as kernel_exp: x < -86 gives 0, x > 0 (or NaN) is taken as 0. */
export function exp32(x) {
  x = f(x);
  if (!(x <= 0)) x = 0;
  if (x < -86) return 0;
  const n = Math.floor(f(f(x * LOG2E) + 0.5));
  let r = f(x - f(n * LN2_HI));
  r = f(r - f(n * LN2_LO));
  let p = EXP_TERMS[0];
  for (let k = 1; k < EXP_TERMS.length; k++) p = f(f(p * r) + EXP_TERMS[k]);
  return f(p * bitsToFloat(((n + 127) << 23) >>> 0));
}

/** The natural log of a positive normal float, as kernel_log; 0 for anything else. */
export function log32(x) {
  x = f(x);
  if (!(x >= FLT_MIN_NORMAL) || x > FLT_MAX) return 0;
  const bits = floatToBits(x);
  let exponent = (bits >>> 23) - 127;
  let m = bitsToFloat(((bits & 0x007fffff) | 0x3f800000) >>> 0);
  if (m > SQRT2) {
    m = f(m * 0.5);
    exponent += 1;
  }
  const fraction = f(m - 1);
  const s = f(fraction / f(2 + fraction));
  const s2 = f(s * s);
  let q = LOG_TERMS[0];
  for (let k = 1; k < LOG_TERMS.length; k++) q = f(f(q * s2) + LOG_TERMS[k]);
  const logM = f(f(2 * s) * q);
  return f(f(exponent * LN2_HI) + f(f(exponent * LN2_LO) + logM));
}

function halfCosine(progress) {
  const x = Math.PI * progress / 2.0;
  const xSquared = x * x;
  let cosine = 0.0;
  for (let k = 13; k >= 0; k--) cosine = cosine * xSquared + COSINE_COEFFICIENTS[k];
  return cosine * cosine;
}

/** The lr of inner step `step` of round `round` (compute/lr_schedule.py, kernel.c's inner_lr). */
export function scheduledLr(schedule, round, step) {
  const peak = schedule.lr;
  const progressStep = Number(round) * schedule.innerSteps + Number(step);
  const warmup = schedule.warmup;
  if (progressStep < warmup) return peak * (progressStep + 1) / warmup;
  if (schedule.kind === SCHEDULE_KINDS.constant) return peak;
  const decaySteps = schedule.rounds * schedule.innerSteps - 1 - warmup;
  let progress = 1.0;
  if (decaySteps > 0) progress = Math.min(1.0, (progressStep - warmup) / decaySteps);
  const final = schedule.finalLr;
  if (schedule.kind === SCHEDULE_KINDS.linear) return final + (peak - final) * (1.0 - progress);
  return final + (peak - final) * halfCosine(progress);
}

const MASK = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;
const BATCH_DOMAIN = 0x74726f6c6c797731n;

function mix64(z) {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

function u64(value, name) {
  const big = BigInt(value);
  if (big < 0n || big > MASK) throw new RangeError(`${name} must be in [0, 2**64), got ${value}`);
  return big;
}

/** The sample indices of the batch of `step` in the stream (seed, worker, round), as kernel.c draws them. */
export function batchIndices(stream, step, batchSize, count) {
  let key = BATCH_DOMAIN;
  for (const value of [stream.seed, stream.worker, stream.round, u64(step, "step")]) {
    key = mix64(((key ^ value) + GOLDEN) & MASK);
  }
  const indices = new Uint32Array(batchSize);
  const big = BigInt(count);
  for (let i = 0; i < batchSize; i++) {
    const r = mix64((key + BigInt(i + 1) * GOLDEN) & MASK);
    indices[i] = Number(((r >> 32n) * big) >> 32n);
  }
  return indices;
}

function power(base, exponent) {
  let result = 1.0;
  while (exponent) {
    if (exponent & 1) result = result * base;
    base = base * base;
    exponent >>>= 1;
  }
  return result;
}

function parameterCount(sizes) {
  let count = 0;
  for (let l = 0; l + 1 < sizes.length; l++) count += sizes[l + 1] * (sizes[l] + 1);
  return count;
}

function checkShape(sizes, batchSize) {
  const layers = sizes.length - 1;
  const whole = (value, low, high) => Number.isInteger(value) && value >= low && value <= high;
  if (!whole(layers, 1, 16) || !whole(batchSize, 1, 65536) || !sizes.every((size) => whole(size, 1, 65536))) {
    throw new RangeError("sizes or batch size outside the kernel's limits");
  }
  if (batchSize * Math.max(...sizes) > 0x08000000 || parameterCount(sizes) > 0x08000000) {
    throw new RangeError("sizes or batch size outside the kernel's limits");
  }
}

function checkTargets(targets, count, classes) {
  for (let i = 0; i < count; i++) {
    if (targets[i] >= classes) throw new RangeError("a target outside the model's classes");
  }
}

/** The kernel in plain JavaScript: the fallback where WebAssembly is missing, and the reference beside it. */
export class JsKernel {
  configure(sizes, batchSize) {
    checkShape(sizes, batchSize);
    this.sizes = [...sizes];
    this.layers = sizes.length - 1;
    this.batchSize = batchSize;
    this.params = parameterCount(sizes);
    const widest = Math.max(...sizes);
    this.weights = new Float32Array(this.params);
    this.weightBits = new Uint32Array(this.weights.buffer);
    this.grads = new Float32Array(this.params);
    this.expAvg = new Float32Array(this.params);
    this.expAvgBits = new Uint32Array(this.expAvg.buffer);
    this.expAvgSq = new Float32Array(this.params);
    this.expAvgSqBits = new Uint32Array(this.expAvgSq.buffer);
    this.activations = sizes.map((size) => new Float32Array(batchSize * size));
    this.delta = new Float32Array(batchSize * widest);
    this.deltaNext = new Float32Array(batchSize * widest);
    this.targets = new Uint32Array(batchSize);
    this.offsets = [0];
    for (let l = 0; l < this.layers; l++) this.offsets.push(this.offsets[l] + sizes[l + 1] * (sizes[l] + 1));
    this.adamStep = 0;
  }

  setData(inputs, targets) {
    const count = targets.length;
    if (inputs.length !== count * this.sizes[0] || count < 1) throw new RangeError("data does not fit the model");
    checkTargets(targets, count, this.sizes[this.layers]);
    this.dataInputs = Float32Array.from(inputs);
    this.dataTargets = Uint32Array.from(targets);
    this.dataCount = count;
  }

  setOptimizer(beta1, beta2, eps, weightDecay) {
    this.optimizer = { beta1, beta2, eps, weightDecay };
  }

  setSchedule(lr, kind, warmup, finalLr, rounds, innerSteps) {
    this.schedule = { lr, kind, warmup, finalLr, rounds, innerSteps };
  }

  setStream(seed, worker, round) {
    this.stream = { seed: u64(seed, "seed"), worker: u64(worker, "worker"), round: u64(round, "round") };
  }

  innerLr(round, step) {
    return scheduledLr(this.schedule, round, step);
  }

  batch(step) {
    return batchIndices(this.stream, step, this.batchSize, this.dataCount);
  }

  load({ weights, expAvg, expAvgSq, adamStep }) {
    for (const array of [weights, expAvg, expAvgSq]) {
      if (array.length !== this.params) throw new RangeError(`a state of ${array.length} floats for ${this.params}`);
    }
    this.weights.set(weights);
    this.expAvg.set(expAvg);
    this.expAvgSq.set(expAvgSq);
    this.adamStep = adamStep;
  }

  state() {
    return { weights: this.weights.slice(), expAvg: this.expAvg.slice(), expAvgSq: this.expAvgSq.slice(),
      adamStep: this.adamStep };
  }

  drawBatch(step) {
    const indices = this.batch(step);
    const features = this.sizes[0];
    const x = this.activations[0];
    for (let b = 0; b < this.batchSize; b++) {
      const index = indices[b];
      this.targets[b] = this.dataTargets[index];
      x.set(this.dataInputs.subarray(index * features, (index + 1) * features), b * features);
    }
  }

  // The matrix products sum four independent outputs (or, for the weight gradients, four batch rows of each
  // element's sum) per pass, as plain scalars: each sum's own sequence of operations is kernel.c's.
  forwardLayer(layer) {
    const inputs = this.sizes[layer];
    const outputs = this.sizes[layer + 1];
    const w = this.weights;
    const offset = this.offsets[layer];
    const biasAt = offset + outputs * inputs;
    const x = this.activations[layer];
    const y = this.activations[layer + 1];
    const relu = layer + 1 < this.layers;
    const activate = (value) => (relu ? (value > 0 ? value : 0) : value);
    for (let b = 0; b < this.batchSize; b++) {
      const xb = b * inputs;
      const yb = b * outputs;
      let o = 0;
      for (; o + 4 <= outputs; o += 4) {
        const w0 = offset + o * inputs;
        const [w1, w2, w3] = [w0 + inputs, w0 + 2 * inputs, w0 + 3 * inputs];
        let [a0, a1, a2, a3] = [0, 0, 0, 0];
        for (let i = 0; i < inputs; i++) {
          const xi = x[xb + i];
          a0 = f(a0 + f(w[w0 + i] * xi));
          a1 = f(a1 + f(w[w1 + i] * xi));
          a2 = f(a2 + f(w[w2 + i] * xi));
          a3 = f(a3 + f(w[w3 + i] * xi));
        }
        y[yb + o] = activate(f(a0 + w[biasAt + o]));
        y[yb + o + 1] = activate(f(a1 + w[biasAt + o + 1]));
        y[yb + o + 2] = activate(f(a2 + w[biasAt + o + 2]));
        y[yb + o + 3] = activate(f(a3 + w[biasAt + o + 3]));
      }
      for (; o < outputs; o++) {
        const wo = offset + o * inputs;
        let acc = 0;
        for (let i = 0; i < inputs; i++) acc = f(acc + f(w[wo + i] * x[xb + i]));
        y[yb + o] = activate(f(acc + w[biasAt + o]));
      }
    }
  }

  softmaxCrossEntropy() {
    const classes = this.sizes[this.layers];
    const z = this.activations[this.layers];
    const d = this.delta;
    const batch = this.batchSize;
    let total = 0;
    for (let b = 0; b < batch; b++) {
      const zb = b * classes;
      let top = z[zb];
      for (let j = 1; j < classes; j++) if (z[zb + j] > top) top = z[zb + j];
      let sum = 0;
      for (let j = 0; j < classes; j++) {
        d[zb + j] = exp32(f(z[zb + j] - top));
        sum = f(sum + d[zb + j]);
      }
      const target = this.targets[b];
      const loss = f(log32(sum) - f(z[zb + target] - top));
      total = f(total + loss);
      for (let j = 0; j < classes; j++) {
        const p = f(d[zb + j] / sum);
        d[zb + j] = f((j === target ? f(p - 1) : p) / batch);
      }
    }
    // A NaN loss is the one NaN (0x7fc00000 as a float32), as kernel.c returns it: the NaN that arithmetic gives
    // is the machine's (x86 makes a negative one), and a verifier's vote digests the losses' bits.
    const mean = f(total / batch);
    return mean === mean ? mean : NaN;
  }

  backwardLayer(layer) {
    const inputs = this.sizes[layer];
    const outputs = this.sizes[layer + 1];
    const offset = this.offsets[layer];
    this.weightGradients(inputs, outputs, offset, this.activations[layer]);
    if (layer === 0) return;
    this.inputGradients(inputs, outputs, offset, this.activations[layer]);
    [this.delta, this.deltaNext] = [this.deltaNext, this.delta];
  }

  // dW[o][i] = sum over b ascending of delta[b][o] x[b][i], four rows b per pass; dbias[o] the same over delta.
  weightGradients(inputs, outputs, offset, x) {
    const g = this.grads;
    const d = this.delta;
    const biasAt = offset + outputs * inputs;
    g.fill(0, offset, offset + outputs * (inputs + 1));
    let b = 0;
    for (; b + 4 <= this.batchSize; b += 4) {
      const x0 = b * inputs;
      const [x1, x2, x3] = [x0 + inputs, x0 + 2 * inputs, x0 + 3 * inputs];
      for (let o = 0; o < outputs; o++) {
        const [d0, d1, d2, d3] = [d[b * outputs + o], d[(b + 1) * outputs + o], d[(b + 2) * outputs + o],
          d[(b + 3) * outputs + o]];
        const go = offset + o * inputs;
        for (let i = 0; i < inputs; i++) {
          let sum = g[go + i];
          sum = f(sum + f(d0 * x[x0 + i]));
          sum = f(sum + f(d1 * x[x1 + i]));
          sum = f(sum + f(d2 * x[x2 + i]));
          g[go + i] = f(sum + f(d3 * x[x3 + i]));
        }
        g[biasAt + o] = f(f(f(f(g[biasAt + o] + d0) + d1) + d2) + d3);
      }
    }
    for (; b < this.batchSize; b++) {
      const xb = b * inputs;
      for (let o = 0; o < outputs; o++) {
        const dv = d[b * outputs + o];
        const go = offset + o * inputs;
        for (let i = 0; i < inputs; i++) g[go + i] = f(g[go + i] + f(dv * x[xb + i]));
        g[biasAt + o] = f(g[biasAt + o] + dv);
      }
    }
  }

  // deltaNext[b][i] = (sum over o ascending of W[o][i] delta[b][o]) where x[b][i] > 0, else 0: four o per pass.
  inputGradients(inputs, outputs, offset, x) {
    const w = this.weights;
    const d = this.delta;
    const next = this.deltaNext;
    for (let b = 0; b < this.batchSize; b++) {
      const db = b * outputs;
      const nb = b * inputs;
      next.fill(0, nb, nb + inputs);
      let o = 0;
      for (; o + 4 <= outputs; o += 4) {
        const [d0, d1, d2, d3] = [d[db + o], d[db + o + 1], d[db + o + 2], d[db + o + 3]];
        const w0 = offset + o * inputs;
        const [w1, w2, w3] = [w0 + inputs, w0 + 2 * inputs, w0 + 3 * inputs];
        for (let i = 0; i < inputs; i++) {
          let sum = next[nb + i];
          sum = f(sum + f(w[w0 + i] * d0));
          sum = f(sum + f(w[w1 + i] * d1));
          sum = f(sum + f(w[w2 + i] * d2));
          next[nb + i] = f(sum + f(w[w3 + i] * d3));
        }
      }
      for (; o < outputs; o++) {
        const dv = d[db + o];
        const wo = offset + o * inputs;
        for (let i = 0; i < inputs; i++) next[nb + i] = f(next[nb + i] + f(w[wo + i] * dv));
      }
      for (let i = 0; i < inputs; i++) if (!(x[nb + i] > 0)) next[nb + i] = 0;
    }
  }

  adamw(lr) {
    const { beta1, beta2, eps, weightDecay } = this.optimizer;
    this.adamStep += 1;
    const correction1 = 1.0 - power(beta1, this.adamStep);
    const correction2 = 1.0 - power(beta2, this.adamStep);
    const decay = f(1.0 - lr * weightDecay);
    const b1 = f(beta1);
    const rest1 = f(1.0 - beta1);
    const b2 = f(beta2);
    const rest2 = f(1.0 - beta2);
    const stepSize = f(lr / correction1);
    const correction2Sqrt = f(Math.sqrt(correction2));
    const epsilon = f(eps);
    const p = this.weights;
    const m = this.expAvg;
    const v = this.expAvgSq;
    const g = this.grads;
    for (let k = 0; k < this.params; k++) {
      const grad = g[k];
      let mk = f(f(b1 * m[k]) + f(rest1 * grad));
      let vk = f(f(b2 * v[k]) + f(rest2 * f(grad * grad)));
      if (Math.abs(mk) < FLT_MIN_NORMAL) mk = 0;
      if (vk < FLT_MIN_NORMAL) vk = 0;
      const denom = f(f(f(Math.sqrt(vk)) / correction2Sqrt) + epsilon);
      const pk = f(f(p[k] * decay) - f(f(stepSize * mk) / denom));
      if (pk === pk) p[k] = pk; else this.weightBits[k] = CANONICAL_NAN;
      if (mk === mk) m[k] = mk; else this.expAvgBits[k] = CANONICAL_NAN;
      if (vk === vk) v[k] = vk; else this.expAvgSqBits[k] = CANONICAL_NAN;
    }
  }

  trainStep(step) {
    this.drawBatch(step);
    for (let l = 0; l < this.layers; l++) this.forwardLayer(l);
    const loss = this.softmaxCrossEntropy();
    for (let l = this.layers; l-- > 0;) this.backwardLayer(l);
    this.adamw(this.innerLr(this.stream.round, step));
    return loss;
  }
}

const REFUSALS = { 1: "sizes or batch size outside the kernel's limits", 2: "the kernel's memory cannot grow",
  3: "no training data", 4: "a target outside the model's classes" };

/** The same interface over the compiled kernel (kernel.wasm), in any WebAssembly engine. */
export class WasmKernel {
  static async load(wasmBytes) {
    const { instance } = await WebAssembly.instantiate(wasmBytes, {});
    const kernel = new WasmKernel(instance.exports);
    if (kernel.exports.kernel_version() !== KERNEL_VERSION) {
      throw new Error(`the kernel is version ${kernel.exports.kernel_version()}, this page knows ${KERNEL_VERSION}`);
    }
    return kernel;
  }

  constructor(exports) {
    this.exports = exports;
  }

  check(code) {
    if (code !== 0) throw new RangeError(`the kernel refused: ${REFUSALS[code] || `error ${code}`}`);
  }

  write(typedArray) {
    const bytes = new Uint8Array(typedArray.buffer, typedArray.byteOffset, typedArray.byteLength);
    const at = this.exports.kernel_alloc(bytes.length);
    if (at === 0 && bytes.length) throw new RangeError("the kernel's memory cannot grow");
    new Uint8Array(this.exports.memory.buffer, at, bytes.length).set(bytes);
    return at;
  }

  floats(at, count) {
    return new Float32Array(this.exports.memory.buffer, at, count);
  }

  configure(sizes, batchSize) {
    checkShape(sizes, batchSize);
    this.sizes = [...sizes];
    this.batchSize = batchSize;
    const sizesAt = this.write(Uint32Array.from(sizes));
    this.check(this.exports.configure(sizes.length - 1, sizesAt, batchSize));
    this.params = this.exports.param_count();
  }

  setData(inputs, targets) {
    const count = targets.length;
    if (inputs.length !== count * this.sizes[0] || count < 1) throw new RangeError("data does not fit the model");
    checkTargets(targets, count, this.sizes[this.sizes.length - 1]);
    const inputsAt = this.write(Float32Array.from(inputs));
    const targetsAt = this.write(Uint32Array.from(targets));
    this.check(this.exports.set_data(inputsAt, targetsAt, count));
  }

  setOptimizer(beta1, beta2, eps, weightDecay) {
    this.exports.set_optimizer(beta1, beta2, eps, weightDecay);
  }

  setSchedule(lr, kind, warmup, finalLr, rounds, innerSteps) {
    this.exports.set_schedule(lr, kind, BigInt(warmup), finalLr, BigInt(rounds), BigInt(innerSteps));
  }

  setStream(seed, worker, round) {
    this.exports.set_stream(BigInt.asIntN(64, u64(seed, "seed")), BigInt.asIntN(64, u64(worker, "worker")),
      BigInt.asIntN(64, u64(round, "round")));
  }

  innerLr(round, step) {
    return this.exports.inner_lr(BigInt(round), BigInt(step));
  }

  batch(step) {
    this.check(this.exports.draw_batch(BigInt.asIntN(64, u64(step, "step"))));
    return new Uint32Array(this.exports.memory.buffer, this.exports.indices_ptr(), this.batchSize).slice();
  }

  load({ weights, expAvg, expAvgSq, adamStep }) {
    for (const array of [weights, expAvg, expAvgSq]) {
      if (array.length !== this.params) throw new RangeError(`a state of ${array.length} floats for ${this.params}`);
    }
    this.floats(this.exports.weights_ptr(), this.params).set(weights);
    this.floats(this.exports.exp_avg_ptr(), this.params).set(expAvg);
    this.floats(this.exports.exp_avg_sq_ptr(), this.params).set(expAvgSq);
    this.exports.set_adam_step(adamStep);
  }

  state() {
    return { weights: this.floats(this.exports.weights_ptr(), this.params).slice(),
      expAvg: this.floats(this.exports.exp_avg_ptr(), this.params).slice(),
      expAvgSq: this.floats(this.exports.exp_avg_sq_ptr(), this.params).slice(),
      adamStep: this.exports.adam_step() };
  }

  trainStep(step) {
    return this.exports.train_step(BigInt.asIntN(64, u64(step, "step")));
  }
}
