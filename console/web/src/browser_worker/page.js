// The browser worker's page (worker.html): a worker key kept in this browser, registration with a relay, the
// tasks a tab may train, and the protocol loop (protocol.js) with its progress, log and earnings shown.
//
// Served by the console at /worker (behind its access token, like its other pages) or by any static server from
// console/web/dist/worker/worker.html, against any node and relay named in the address:
//
//     worker.html?node=http://127.0.0.1:26657&relay=http://127.0.0.1:26660
//
// Options in the address: `kernel=js` trains with the kernel's JavaScript twin instead of the .wasm (the same
// bits; what a browser without WebAssembly does by itself). TEST SWITCH: `test=1&cheat=NAME` makes the tab play
// a cheat of cheats.js (the end-to-end tests show it caught and slashed); without `test=1` a cheat is refused.
//
// Every action runs guarded: what goes wrong (a key file that is not one, a wrong password, a task that does not
// allow wasm32, a relay that refuses a push, a shard that does not decrypt) is shown as the page's message, and
// nothing is signed after it. `document.body.dataset.phase` says where the page is (locked, ready, working,
// finished), for people's style sheets and for the tests.

import { CHEATS } from "./cheats.js";
import { NodeClient } from "./node_client.js";
import { createKey, forgetKey, importKey, storedKey, unlockKey } from "./page_key.js";
import { $, log, progress, renderEarnings, renderTasks, setText, show, showMessage } from "./page_view.js";
import { BrowserWorker, WorkerRefused } from "./protocol.js";
import { RoundTrainer } from "./round_trainer.js";

const options = new URLSearchParams(location.search);
const storage = globalThis.localStorage;
let worker = null;
let busy = false;

function setPhase(phase) {
  document.body.dataset.phase = phase;
}

/** Run `action`, showing what goes wrong as the page's message; one action at a time. */
async function guarded(action) {
  if (busy) {
    showMessage("the page is still busy with the last action", true);
    return undefined;
  }
  busy = true;
  showMessage("");
  try {
    return await action();
  } catch (error) {
    showMessage(String(error?.message ?? error));
    return undefined;
  } finally {
    busy = false;
  }
}

/** The cheat this tab plays: only on a test's page (`test=1`), and only one cheats.js knows. */
function testCheat() {
  const cheat = options.get("cheat") ?? "";
  if (cheat === "") return "";
  if (options.get("test") !== "1") throw new WorkerRefused("a cheat is a test switch: this page is not a test's");
  if (!(cheat in CHEATS)) {
    throw new WorkerRefused(`no browser cheat named ${cheat} (${Object.keys(CHEATS).join(", ")})`);
  }
  return cheat;
}

function startTrainer(task, data) {
  return RoundTrainer.start(new URL("./train_worker.js", import.meta.url), new URL("./kernel.wasm", import.meta.url),
    task, data, { useJs: options.get("kernel") === "js" || typeof WebAssembly !== "object", cheat: testCheat() });
}

function report(kind, detail) {
  if (kind === "action") {
    setText("work-action", detail.reason);
    return;
  }
  if (kind === "kernel") setText("work-kernel", detail.kernel === "wasm" ? "WebAssembly" : "JavaScript");
  if (kind === "round" || kind === "segment") {
    const done = kind === "round" ? 0 : detail.segment;
    progress(done, detail.segments, `Round ${detail.round}: segment ${done} of ${detail.segments}`);
  }
  if (kind === "finished") renderEarnings(detail);
  const lines = {
    joined: () => `joined task ${detail.taskId} (collateral ${detail.collateral} utrl locked, block ${detail.height})`,
    round: () => `round ${detail.round}: training ${detail.steps} steps in ${detail.segments} segments`,
    published: () => `round ${detail.round}: ${detail.blobs} blobs published on ${detail.relay}`,
    committed: () => `round ${detail.round}: committed in block ${detail.height}`,
    final: () => `final weights ${detail.finalWeightsHash} reported in block ${detail.height}`,
    finished: () => `done: ${detail.reason}`,
    waiting: () => detail.reason,
    log: () => detail.text,
  };
  if (kind in lines) log(lines[kind]());
}

async function connect(key) {
  const cheat = testCheat(); // a cheat outside a test's page: refused before the page can sign anything
  const node = new NodeClient($("node-url").value, { fetch: globalThis.fetch.bind(globalThis) });
  const status = await node.status();
  worker = new BrowserWorker({ node, relayUrl: $("relay-url").value, key, fetch: globalThis.fetch.bind(globalThis),
    startTrainer, report, cheat });
  setText("network-status", `Connected to ${status.chainId} at height ${status.height}.`);
  show("key", false);
  show("account");
  show("tasks");
  setPhase("ready");
  await refreshAccount();
  await refreshTasks();
}

async function refreshAccount() {
  const { address, balance, record } = await worker.account();
  setText("address", address);
  setText("balance", `${balance} utrl`);
  setText("registration", record === null ? "no"
    : `yes, stake ${record.stake} utrl, relay ${record.relay || "none"}, earned ${record.earned} utrl`);
}

async function refreshTasks() {
  renderTasks(await worker.tasks(), (taskId) => guarded(() => joinAndRun(taskId)));
}

async function joinAndRun(taskId) {
  const cheat = testCheat();
  if (cheat) showMessage(`TEST SWITCH: this tab cheats (${cheat}) and will be slashed`, true);
  await worker.join(taskId);
  await refreshTasks();
  show("work");
  setText("work-task", `#${taskId}`);
  setPhase("working");
  const outcome = await worker.run(taskId);
  setPhase("finished");
  await refreshAccount();
  return outcome;
}

function onSubmit(id, action) {
  $(id).addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(action);
  });
}

function start() {
  $("node-url").value = options.get("node") ?? "http://127.0.0.1:26657";
  $("relay-url").value = options.get("relay") ?? "";
  const stored = storedKey(storage);
  if (stored !== null) {
    setText("stored-address", stored.address);
    show("unlock-form");
  }
  setPhase("locked");
  onSubmit("unlock-form", async () => connect(await unlockKey(storage, $("unlock-password").value)));
  onSubmit("create-form", async () => connect(await createKey(storage, $("create-password").value)));
  onSubmit("import-form", async () => {
    const text = await $("import-file").files[0].text();
    await connect(await importKey(storage, text, $("import-file-password").value, $("import-password").value));
  });
  onSubmit("network-form", async () => {
    if (worker === null) throw new WorkerRefused("create, import or unlock a key first");
    await connect(worker.key);
  });
  $("forget-key").addEventListener("click", () => {
    forgetKey(storage);
    show("unlock-form", false);
  });
  $("register").addEventListener("click", () => guarded(async () => {
    await worker.register();
    await refreshAccount();
  }));
  $("refresh-tasks").addEventListener("click", () => guarded(refreshTasks));
}

start();
