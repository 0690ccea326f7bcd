// The browser worker's protocol loop: what compute/worker/service.py does for a native worker, in the order it
// does it, for a tab that trains with the wasm32 kernel and publishes through a relay (a browser cannot serve).
//
//   const worker = new BrowserWorker({node, relayUrl, key, fetch, startTrainer, report});
//   await worker.register();                 // stake, with the relay as its blob service (once)
//   const tasks = await worker.tasks();      // live tasks, each saying whether this tab may train it
//   await worker.join(7);                    // checks first (wasm32 allowed, data obtainable, collateral)
//   const outcome = await worker.run(7);     // rounds until the chain says it is done: {reason, member, view}
//
// The chain is the clock (plan.js): the loop reads the task, does what the chain calls for (train and commit a
// round, report W_R, wait while others verify), and reads again. A round: W_r from the passed updates of the
// earlier rounds (the weights follower), the round trained in a Web Worker (round_trainer.js), the update and
// its error-feedback residual encoded, every checkpoint and both blobs pushed to the relay, then the
// commitment. Nothing is signed before what it names is checked and published; a refusal of the relay stops
// the round before its commitment. A private task's key box that is bad is reported on chain (the one message
// signed after it), data that does not decrypt stops the tab with nothing signed. A tab keeps its state in
// memory only: a tab closed mid-round misses that round (the chain drops it for the missed round, a penalty,
// never a slash for cheating).
//
// Everything outside (the node client, the relay pusher, the dataset, the trainer) is passed in or built here
// from what is passed in; no DOM: `report(kind, detail)` tells the page what happens. TEST SWITCH: `cheat` names
// a cheat of cheats.js the tab plays (the page passes one only when opened as a test).

import { encodeTensors, sha256Hex } from "./canonical_encode.js";
import { cheatPlan } from "./cheats.js";
import { WeightsFollower } from "./aggregate.js";
import { proveBoxOpening } from "./box_proof.js";
import { TxRejected } from "./chain_errors.js";
import { BadDataKey } from "./data_errors.js";
import { openDataKey } from "./data_key.js";
import { datasetUrls, loadDataset } from "./dataset.js";
import { sign } from "./keys.js";
import { MarketReads, memberOf } from "./market_reads.js";
import * as plan from "./plan.js";
import { RelayPusher } from "./relay_push.js";
import { presentRound } from "./round_publication.js";
import { dataRefusal, relayRefusal } from "./refusals.js";
import { TaskUnfit, WASM32, allowedKernels, checkWasm32, readTaskSpec } from "./task_spec.js";
import { msgCommitRound, msgJoinTask, msgRegisterWorker, msgReportBadKey, msgUpdateWorker } from "./tx.js";
import { sendMessages } from "./tx_sender.js";

/** Something the tab will not do, with the reason a person reads (nothing was signed). */
export class WorkerRefused extends Error {
  constructor(message) {
    super(message);
    this.name = "WorkerRefused";
  }
}

const DEVICE = "browser wasm32";
const DECLARED_SPEED = 1;
/** Samples per second registered: the chain needs a number above 0, and a tab has not measured itself before
 * it trains; 1 is the least, so no requester counts on more than a tab gives. */

export class BrowserWorker {
  constructor({ node, relayUrl, key, fetch, startTrainer, report = () => {}, sleep, pollSeconds = 1, cheat = "" }) {
    this.node = node;
    this.relayUrl = (relayUrl ?? "").replace(/\/+$/, "");
    this.key = key;
    this.fetch = fetch;
    this.startTrainer = startTrainer; // (task, data) -> RoundTrainer
    this.report = report;
    this.reads = new MarketReads(node);
    this.relay = this.relayUrl ? new RelayPusher(this.relayUrl, key, sign, { fetch }) : null;
    this.pollSeconds = pollSeconds;
    this.sleep = sleep ?? ((seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000)));
    this.stopped = false;
    this.cheat = cheat;
    this.plan = cheatPlan(cheat); // TEST SWITCH: honest unless a test's page names a cheat
  }

  /** Sign and send one message, waiting for its block (TxRejected with the chain's log). */
  send(message) {
    return sendMessages(this.node, this.key, [message]);
  }

  get address() {
    return this.key.address;
  }

  stop() {
    this.stopped = true;
  }

  /** {address, balance, record (null: not registered)}. */
  async account() {
    const [{ balance }, record] = await Promise.all([this.node.account(this.address),
      this.reads.worker(this.address)]);
    return { address: this.address, balance, record };
  }

  hardware() {
    const memoryMb = Math.round((globalThis.navigator?.deviceMemory ?? 1) * 1024);
    return { device: DEVICE, samplesPerSecond: DECLARED_SPEED, memoryMb, threads: 1 };
  }

  /** Register with the relay as this worker's blob service (the chain's minimum stake), or move an existing
   * registration to this relay; nothing when it is registered so already. */
  async register() {
    if (!this.relay) throw new WorkerRefused("a browser cannot serve blobs: open the page with a relay (?relay=URL)");
    const { balance, record } = await this.account();
    if (record !== null) {
      if (record.relay === this.relayUrl) return { already: true, record };
      await this.send(msgUpdateWorker({ hardware: this.hardware(), relay: this.relayUrl }));
      return { moved: true };
    }
    const stake = BigInt((await this.reads.params()).min_worker_stake);
    if (BigInt(balance) < stake) {
      throw new WorkerRefused(`registering stakes ${stake} utrl and this key holds ${balance}: ` +
        `fund ${this.address} first`);
    }
    const included = await this.send(msgRegisterWorker({ stake, hardware: this.hardware(), blobUrl: "",
      relay: this.relayUrl }));
    return { stake, height: included.height };
  }

  /** The live tasks, each with `wasm32` (whether its spec allows the tab's kernel) and `takes` (joinable now). */
  async tasks() {
    const tasks = [];
    for (const summary of await this.reads.liveTasks()) {
      let kernels = [];
      try {
        kernels = allowedKernels(JSON.parse(await this.reads.specText(summary.id)));
      } catch (error) {
        kernels = [];
      }
      tasks.push({ ...summary, kernels, wasm32: kernels.includes(WASM32), takes: plan.takesWorkers(summary) });
    }
    return tasks;
  }

  /** The task's spec for the kernel and its training data, checked: TaskUnfit (wasm32 not allowed, not an
   * MLP), a DatasetError (not served, does not decrypt, a hash mismatch). `dataKey`: a private task's. */
  async prepare(taskId, dataKey = null) {
    const specText = await this.reads.specText(taskId);
    const spec = checkWasm32(JSON.parse(specText), taskId); // wasm32 and an MLP, before anything is fetched
    const view = await this.reads.task(taskId);
    const data = await loadDataset(spec, { fetch: this.fetch, dataKey, urls: datasetUrls(spec, view) });
    const task = readTaskSpec(specText, data, taskId);
    spec.training.seed = task.training.seed; // exact: JSON.parse rounds a seed past 2^53
    return { task, spec, data, view };
  }

  /** Join task `taskId` after checking what can be checked before any collateral is locked. */
  async join(taskId) {
    checkWasm32(JSON.parse(await this.reads.specText(taskId)), taskId); // TaskUnfit, saying why
    const summary = (await this.reads.liveTasks()).find((task) => task.id === taskId);
    if (summary === undefined) throw new WorkerRefused(`task ${taskId} is not open or running`);
    if (!plan.takesWorkers(summary)) throw new WorkerRefused(`task ${taskId} takes no workers now`);
    const { record, balance } = await this.account();
    if (record === null) throw new WorkerRefused("register first: a task takes only registered workers");
    if (BigInt(summary.collateral) > BigInt(balance)) {
      throw new WorkerRefused(`task ${taskId} locks ${summary.collateral} utrl of collateral; this key holds ` +
        `${balance}`);
    }
    if (!(await this.reads.task(taskId)).private_data) await this.prepare(taskId); // its data, checked first
    const included = await this.send(msgJoinTask(taskId));
    this.report("joined", { taskId, height: included.height, collateral: summary.collateral });
    return included;
  }

  /** Work on task `taskId` until the chain says this worker is done with it: {reason, member, view}. */
  async run(taskId) {
    const context = await this.taskContext(taskId);
    if (context.finished) return context.finished;
    try {
      for (;;) {
        const view = await this.reads.task(taskId);
        const action = plan.decide(view, this.address);
        this.report("action", { taskId, ...action, phase: view.phase, view });
        if (action.kind === plan.FINISH) return this.finish(view, action.reason);
        if (this.stopped) return { reason: "stopped", view };
        if (action.kind === plan.TRAIN) await this.workRound(context, view, action.round);
        else if (action.kind === plan.REPORT_FINAL) await this.reportFinal(context, view);
        else await this.sleep(this.pollSeconds);
      }
    } finally {
      context.trainer?.close();
    }
  }

  /** Spec, data (a private task's key awaited from the requester first) and trainer of a joined task. */
  async taskContext(taskId) {
    const view = await this.reads.task(taskId);
    let dataKey = null;
    if (view.private_data) {
      for (;;) {
        const current = await this.reads.task(taskId);
        const action = plan.decide(current, this.address);
        if (action.kind === plan.FINISH) {
          return { finished: this.finish(current, `${action.reason} before its data key came`) };
        }
        dataKey = await openDataKey(this.node, taskId, this.key).catch((error) => this.refuseData(error, taskId));
        if (dataKey !== null) break;
        this.report("waiting", { taskId, reason: "waiting for the requester to deliver this worker's data key" });
        await this.sleep(this.pollSeconds * 2);
      }
    }
    const { task, spec, data } = await this.prepare(taskId, dataKey).catch((error) => {
      throw refused(error, dataRefusal(error, taskId));
    });
    const trainer = await this.startTrainer(task, kernelData(data, this.plan));
    this.report("kernel", { taskId, kernel: trainer.kernel });
    const follower = new WeightsFollower(spec, data, { fetchUpdate: (digest, update) => this.fetchBlob(update.blobUrl,
      digest) });
    return { taskId, task, spec, data, trainer, follower, residual: null };
  }

  /** Throws what a person reads of a private task's data that does not open here. A bad key box is reported on
   * chain first (MsgReportBadKey with box_proof.js's proof, as compute/worker/service.py reports it): the chain
   * opens the box itself and releases this worker with its collateral and a compensation. */
  async refuseData(error, taskId) {
    if (!(error instanceof BadDataKey)) throw refused(error, dataRefusal(error, taskId));
    let report = { earlier: true };
    if (!error.reported) {
      try {
        const proof = await proveBoxOpening(this.key.seed, error.sealed);
        const included = await this.send(msgReportBadKey({ taskId, proof }));
        const view = await this.reads.task(taskId);
        report = { height: included.height, compensation: memberOf(view, this.address)?.compensated ?? 0 };
        this.finish(view, "released: its data key box was bad, reported on chain");
      } catch (failure) {
        if (!(failure instanceof TxRejected)) throw failure;
        report = { refused: failure.log };
      }
    }
    throw new WorkerRefused(dataRefusal(error, taskId, report));
  }

  /** A blob by its hash from where a member serves it (the follower checks the bytes against the hash). */
  async fetchBlob(baseUrl, digest) {
    const response = await this.fetch(`${baseUrl}/blobs/${digest}`);
    if (!response.ok) throw new WorkerRefused(`${baseUrl}/blobs/${digest} answered HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  }

  /** Round `round`: W_r, trained, encoded, published on the relay, committed; unless the chain dropped this
   * worker meanwhile (then nothing is committed). */
  async workRound(context, view, round) {
    const { task, taskId } = context;
    const member = memberOf(view, this.address);
    const state = await context.follower.state(round, view);
    const steps = task.innerSteps;
    this.report("round", { taskId, round, steps, segments: Math.ceil(steps / task.checkpointEvery) });
    const presented = await presentRound({
      plan: this.plan, spec: context.spec, task, start: state, workerIndex: member.index, round,
      residual: context.residual, previous: context.previous ?? null,
      train: (planned) => context.trainer.train(planned,
        (checkpoint, segments) => this.report("segment", { taskId, round, segment: checkpoint.index, segments })),
      log: (text) => this.report("log", { text }),
    });
    const after = plan.decide(await this.reads.task(taskId), this.address);
    if (after.kind === plan.FINISH) {
      this.report("log", { text: `round ${round}: trained but not committed (${after.reason})` });
      return;
    }
    await this.relay.pushRound(taskId, round, presented.blobs, presented.listing, presented.withheld)
      .catch((error) => { // the relay's reason, what to do, and no commitment
        throw refused(error, relayRefusal(error, round, this.relayUrl));
      });
    this.report("published", { taskId, round, blobs: presented.blobs.size, relay: this.relayUrl });
    const included = await this.send(msgCommitRound({ taskId, round, ...presented.commit }));
    context.residual = presented.residualTensors; // the next round's update carries it
    context.previous = presented.played;
    this.report("committed", { taskId, round, height: included.height });
  }

  /** The final report: W_R derived from the last round's passed updates, published, its hash committed. */
  async reportFinal(context, view) {
    const { taskId } = context;
    const rounds = view.rounds;
    const state = await context.follower.state(rounds, view);
    const bytes = encodeTensors(state.weights);
    const digest = sha256Hex(bytes);
    await this.relay.pushBlobs(taskId, rounds, new Map([[digest, bytes]]));
    const reported = this.plan.round.finalHash(digest); // TEST SWITCH: a forged final report
    const included = await this.send(msgCommitRound({ taskId, round: rounds, startWeightsHash: reported }));
    this.report("final", { taskId, finalWeightsHash: reported, height: included.height });
  }

  finish(view, reason) {
    const member = memberOf(view, this.address) ?? null;
    this.report("finished", { taskId: view.id, reason, member, finalWeightsHash: view.final_weights_hash });
    return { reason, member, view };
  }
}

/** `error` as the WorkerRefused a person reads (`words`), or as it is where there are none. */
function refused(error, words) {
  return words === null ? error : new WorkerRefused(words);
}

/** What the training Web Worker gets of the dataset: the training split, and the test split only for a test's
 * cheat that trains on it (cheats.js `other_data`). */
function kernelData(data, cheatPlan) {
  const classes = (targets) => new Uint32Array(targets.buffer, targets.byteOffset, targets.length);
  const split = { inputs: data.trainInputs, targets: classes(data.trainTargets) };
  if (!cheatPlan.testSplit) return split;
  return { ...split, testInputs: data.testInputs, testTargets: classes(data.testTargets) };
}

export { TaskUnfit };
