// A task's spec as the browser worker reads it: what the wasm32 kernel trains (model sizes, AdamW, the lr
// schedule, the task's seed) with compute/spec.py's defaults, and whether the spec allows the kernel at all.
//
//   const task = readTaskSpec(specText, {inputSize, numClasses});   // TaskUnfit when the tab cannot train it
//
// The chain checked the spec when it was submitted (chain/market/spec.py); this reads only what a tab needs and
// refuses, with the words a person reads on the page, a task whose spec does not allow `wasm32`.

export const WASM32 = "wasm32";
const DEFAULT_KERNELS = ["torch"];
const DEFAULT_INNER = { lr: 0.001, weight_decay: 0.0, beta1: 0.9, beta2: 0.999, eps: 1e-8 };
const DEFAULT_HIDDEN = [1024, 1024];

/** A task this tab cannot train: its spec does not allow wasm32, or its model is not the kernel's. */
export class TaskUnfit extends Error {
  constructor(message) {
    super(message);
    this.name = "TaskUnfit";
  }
}

/** The kernels a spec allows (`determinism.kernels`, torch when absent). */
export function allowedKernels(spec) {
  return spec?.determinism?.kernels ?? DEFAULT_KERNELS;
}

/** The task's seed as a BigInt: JSON.parse rounds an integer past 2^53, so it is read from the text. */
function exactSeed(specText, parsed) {
  if (Number.isSafeInteger(parsed)) return BigInt(parsed);
  const found = [...specText.matchAll(/"seed"\s*:\s*(\d+)/g)].map((match) => BigInt(match[1]));
  if (found.length !== 1) throw new TaskUnfit("the spec's training.seed cannot be read exactly");
  return found[0];
}

/** Check that the spec allows wasm32 and names an MLP: the parsed spec, else TaskUnfit saying why. */
export function checkWasm32(spec, taskId = "") {
  const kernels = allowedKernels(spec);
  const which = taskId === "" ? "this task" : `task ${taskId}`;
  if (!kernels.includes(WASM32)) {
    throw new TaskUnfit(`${which} does not allow the wasm32 kernel a browser trains with: its spec allows ` +
      `${kernels.join(", ")} (determinism.kernels)`);
  }
  if (spec.model?.arch !== "mlp") {
    throw new TaskUnfit(`${which} trains a ${spec.model?.arch}; the browser's kernel trains an mlp only`);
  }
  return spec;
}

/** What the kernel needs of the task: {sizes, batchSize, checkpointEvery, innerSteps, rounds, training}. */
export function readTaskSpec(specText, shape, taskId = "") {
  const spec = checkWasm32(JSON.parse(specText), taskId);
  const training = spec.training;
  const inner = { ...DEFAULT_INNER, ...(training.inner_optimizer ?? {}) };
  const schedule = inner.schedule ?? { name: "constant" };
  const hidden = spec.model.config?.hidden ?? DEFAULT_HIDDEN;
  return {
    spec,
    sizes: [shape.inputSize, ...hidden, shape.numClasses],
    batchSize: training.batch_size,
    checkpointEvery: training.checkpoint_every,
    innerSteps: training.inner_steps,
    rounds: training.rounds,
    training: {
      seed: exactSeed(specText, training.seed), rounds: training.rounds, innerSteps: training.inner_steps,
      lr: inner.lr, beta1: inner.beta1, beta2: inner.beta2, eps: inner.eps, weightDecay: inner.weight_decay,
      schedule: { name: schedule.name, warmupSteps: schedule.warmup_steps ?? 0, finalLr: schedule.final_lr ?? 0.0 },
    },
  };
}

/** Checkpoints 0..n of a round of `steps` steps, every `every` (compute/spec.py `num_checkpoints`). */
export function numCheckpoints(steps, every) {
  return Math.ceil(steps / every) + 1;
}
