// The page's side of the training Web Worker (train_worker.js): set it up for a task, train a round there, and
// hand back the round's checkpoints as they come, with the progress per segment.
//
//   const trainer = await RoundTrainer.start(workerUrl, wasmUrl, task, data, {useJs, cheat});
//   const round = await trainer.train({startWeights, workerIndex, roundIndex, steps}, onCheckpoint);
//   // {checkpoints: [{index, step, bytes, hash, losses}], endWeights: Float32Array (flat), kernel}
//   trainer.close();
//
// The Web Worker is started with `new Worker(url, {type: "module"})`; a browser without module workers is
// told so on the page (no training happens on the page's own thread).

export class TrainingFailed extends Error {
  constructor(message) {
    super(message);
    this.name = "TrainingFailed";
  }
}

export class RoundTrainer {
  constructor(worker, kernel, task, cheat) {
    this.worker = worker;
    this.kernel = kernel;
    this.task = task;
    this.cheat = cheat;
  }

  /** A Web Worker set up for `task` (readTaskSpec's) on `data` ({inputs: Float32Array, targets: Uint32Array}, and
   * the test split's testInputs, testTargets where a test's `cheat` trains on it). */
  static async start(workerUrl, wasmUrl, task, data, { useJs = false, cheat = "" } = {}) {
    const worker = new Worker(workerUrl, { type: "module" });
    const ready = answerOf(worker, (message) => message.type === "ready");
    const plain = { ...task, spec: undefined };
    worker.postMessage({ type: "task", task: plain, data, wasmUrl: String(wasmUrl), useJs, cheat });
    const { kernel } = await ready;
    return new RoundTrainer(worker, kernel, task, cheat);
  }

  /** Train one round; `onCheckpoint(checkpoint, segments)` after each checkpoint (0 first). */
  async train(round, onCheckpoint = () => {}) {
    const checkpoints = [];
    const segments = Math.ceil(round.steps / this.task.checkpointEvery);
    const done = answerOf(this.worker, (message) => {
      if (message.type !== "checkpoint") return message.type === "done";
      checkpoints.push(message);
      onCheckpoint(message, segments);
      return false;
    });
    this.worker.postMessage({ type: "round", round, cheat: this.cheat });
    await done;
    const last = checkpoints[checkpoints.length - 1];
    return { checkpoints, endWeights: last.weights, kernel: this.kernel };
  }

  close() {
    this.worker.terminate();
  }
}

/** Resolves with the first message `accept` takes; rejects on the worker's error or a failed start. */
function answerOf(worker, accept) {
  return new Promise((resolve, reject) => {
    worker.onmessage = ({ data }) => {
      if (data.type === "error") reject(new TrainingFailed(`training failed: ${data.message}`));
      else if (accept(data)) resolve(data);
    };
    worker.onerror = (event) => {
      reject(new TrainingFailed(`the training worker failed: ${event.message ?? "an error"}`));
    };
  });
}
