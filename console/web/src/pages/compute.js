// Provide compute: create or pick a key, see its balance, measure this machine (preflight), start and stop a
// local worker (a supervised `trolly-worker start`), and follow its status, registration and earnings live.
import { getJson, postJson } from "../api.js";
import { facts, field, h, mono, notice, showFieldError, table, utrl } from "../dom.js";

export async function computePage() {
  const data = await getJson("/api/compute");
  const keysBox = h("div", { id: "compute-keys" });
  const statusBox = h("div", { id: "worker-status", role: "status", "aria-live": "polite" });
  const earningsBox = h("div", { id: "worker-earnings" });
  const preflightBox = h("div", { id: "preflight-result", "aria-live": "polite" });
  const outcome = h("div", { id: "compute-outcome", role: "status", "aria-live": "polite" });

  const keySelect = h("select", { name: "worker-key" });
  const password = h("input", { type: "password", autocomplete: "current-password" });
  const startButton = h("button", { type: "submit" }, "Start the worker");
  const stopButton = h("button", { type: "button", onclick: () => stop() }, "Stop the worker");

  function show(state) {
    keysBox.replaceChildren(table("Keys", ["key", "address", "balance", "proof"],
      state.keys.map((k) => [k.name, mono(k.address), utrl(k.balance), `balance ${k.proof.note}`]),
      "the keyring has no key yet: create one."));
    const chosen = keySelect.value;
    keySelect.replaceChildren(...state.keys.map((k) => h("option", { value: k.name }, k.name)));
    keySelect.value = state.worker.key || chosen || (state.keys[0] && state.keys[0].name) || "";
    const w = state.worker;
    statusBox.replaceChildren(facts([
      ["worker", w.running ? `running (pid ${w.pid})` : w.exit_code === null ? "not started" : `stopped (exit code ${w.exit_code})`],
      ["set up for key", w.key || "not set up yet (the first start sets it up)"],
      ["registered on chain", state.registration ? (state.registration.registered
        ? `yes, stake ${utrl(state.registration.stake)}, tasks ${state.registration.tasks.join(", ") || "none yet"}`
        : "unbonding") + ` (${state.registration.proof.note})` : "no"]]),
    w.log_tail.length ? h("details", {}, h("summary", {}, "The worker's latest log lines"),
      h("pre", { class: "log" }, w.log_tail.join("\n"))) : null);
    statusBox.dataset.running = w.running ? "yes" : "no";
    startButton.disabled = w.running;
    stopButton.disabled = !w.running;
    const e = state.earnings;
    earningsBox.replaceChildren(e ? table(`Earnings (net over all: ${utrl(e.net)})`,
      ["task", "status", "pay", "fees", "net", "collateral locked", "returned"],
      e.tasks.map((t) => [String(t.task_id), `${t.task_status}, ${t.member_status}`, utrl(t.pay), utrl(t.fees),
        utrl(t.net), utrl(t.collateral_locked), utrl(t.collateral_returned)]), "no tasks joined yet.")
      : h("p", {}, "Earnings appear once the worker is registered."),
    ...(e ? [h("p", { class: "proof" }, `Pay, deductions, collateral and stake ${e.proof.note}; fees and the tasks `
      + "joined from the node's transaction index (CometBFT's, not covered by the app hash).")] : []));
    if (state.preflight && !preflightBox.childNodes.length) preflightBox.replaceChildren(preflightLines(state.preflight));
  }

  const newName = h("input", { type: "text", autocomplete: "off", spellcheck: "false" });
  const newPassword = h("input", { type: "password", autocomplete: "new-password" });
  const createForm = h("form", { id: "create-key-form", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    for (const id of ["new-key-name", "new-password"]) showFieldError(id, "");
    try {
      const made = await postJson("/api/compute/keys", { name: newName.value, password: newPassword.value });
      outcome.replaceChildren(notice(`Key ${made.name} created: ${made.address}. Back it up with ` +
        "`trolly-wallet keys export` (its secret never leaves this computer)."));
      newName.value = "";
      show(await getJson("/api/compute"));
    } catch (error) {
      const id = error.body && error.body.field === "new-password" ? "new-password" : "new-key-name";
      if (!showFieldError(id, error.message)) outcome.replaceChildren(notice(error.message, "error"));
    } finally {
      newPassword.value = "";
    }
  } }, h("fieldset", {}, h("legend", {}, "Create a key"),
    field("new-key-name", "Name of the new key", newName),
    field("new-password", "Keyring password (a new keyring takes it as its password)", newPassword),
    h("button", { type: "submit" }, "Create the key")));

  const preflightButton = h("button", { type: "button", onclick: async () => {
    preflightButton.disabled = true;
    preflightBox.replaceChildren(h("p", {}, "Measuring this machine…"));
    try {
      preflightBox.replaceChildren(preflightLines((await postJson("/api/compute/preflight", {})).lines));
    } catch (error) {
      preflightBox.replaceChildren(notice(error.message, "error"));
    } finally {
      preflightButton.disabled = false;
    }
  } }, "Run the preflight");

  const startForm = h("form", { id: "start-worker-form", novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    for (const id of ["worker-key", "worker-password"]) showFieldError(id, "");
    outcome.replaceChildren(notice("Starting the worker…"));
    try {
      await postJson("/api/compute/start", { key: keySelect.value, password: password.value });
      outcome.replaceChildren(notice("The worker started: it registers, then joins tasks that fit this machine."));
      show(await getJson("/api/compute"));
    } catch (error) {
      outcome.replaceChildren();
      if (!showFieldError(error.body && error.body.field === "worker-key" ? "worker-key" : "worker-password",
        error.message)) outcome.replaceChildren(notice(error.message, "error"));
    } finally {
      password.value = "";
    }
  } }, h("fieldset", {}, h("legend", {}, "Run a worker"),
    field("worker-key", "Key the worker signs with", keySelect),
    field("worker-password", "Keyring password (kept only by the worker process while it runs)", password),
    startButton, " ", stopButton));

  async function stop() {
    outcome.replaceChildren(notice("Stopping the worker…"));
    show({ ...(await getJson("/api/compute")), worker: await postJson("/api/compute/stop", {}) });
    outcome.replaceChildren(notice("The worker stopped."));
  }

  show(data);
  return {
    page: [h("h1", {}, "Provide compute"), h("p", {}, "Rent this computer's processor (or GPU) to the network: ",
      "a worker trains tasks that fit it, validators check its work, and verified rounds are paid."),
    h("h2", {}, "Keys and balances"), keysBox, createForm,
    h("h2", {}, "This machine"), preflightButton, preflightBox,
    h("h2", {}, "The worker"), startForm, statusBox, outcome,
    h("h2", {}, "Earnings"), earningsBox],
    static: true,
    live: async () => show(await getJson("/api/compute")),
  };
}

function preflightLines(lines) {
  return h("pre", { class: "log", "aria-label": "Preflight: what this machine can do" }, lines.join("\n"));
}
