// New task, no code: pick a template, bring data (an upload the console packs, or the template's bundled
// dataset), set budget, workers and rounds with the cost and collateral computed live by the CLI's own code,
// review, unlock a key of the local keyring with its password, sign and submit, then follow the task.
import { getJson, postForm, postJson } from "../api.js";
import { facts, field, h, link, notice, showFieldError, table, utrl } from "../dom.js";

const FORMATS = { csv: "a .csv with a header row", jsonl: "a .jsonl of {\"text\", \"label\"} lines",
  images: "a .zip with one folder of images per class", tokens: "a .jsonl of {\"text\", \"label\"} lines" };

export async function newTaskPage() {
  const setup = await getJson("/api/new-task/templates");
  const state = { pack: null, planTimer: null, planSeq: 0, planError: null };
  const costBox = h("div", { id: "cost", role: "status", "aria-live": "polite" }, "Set a budget to see the cost.");
  const packBox = h("div", { id: "pack-summary", role: "status", "aria-live": "polite" },
    "No file uploaded: the template's bundled dataset will be used.");
  const result = h("div", { id: "submit-result", role: "status", "aria-live": "polite" });
  const reviewBox = h("div", { id: "review" }, "Choose the terms above: the task is summed up here before you sign.");

  const templates = h("fieldset", { id: "template" }, h("legend", {}, "1. Template"),
    setup.templates.map((t, i) => h("div", { class: "choice" },
      h("input", { type: "radio", name: "template", id: `template-${t.key}`, value: t.key, checked: i === 0,
        "aria-describedby": `template-${t.key}-about`, onchange: () => { forgetPack(); updateTemplate(); } }),
      h("label", { for: `template-${t.key}` }, t.title),
      h("p", { id: `template-${t.key}-about`, class: "hint" }, t.description))),
    h("p", { id: "template-error", class: "field-error", role: "alert", hidden: true }));

  const fileInput = h("input", { type: "file", name: "file", accept: ".csv,.jsonl,.ndjson,.zip" });
  const labelColumn = h("input", { type: "text", name: "label_column", autocomplete: "off" });
  const keepColumns = h("input", { type: "text", name: "keep_columns", autocomplete: "off" });
  const taskKind = h("select", { name: "task" }, h("option", { value: "classification" }, "Classification: pick one of its values"),
    h("option", { value: "regression" }, "Regression: predict it as a number"));
  const privateBox = h("input", { type: "checkbox", id: "private", name: "private", checked: true });
  const uploadButton = h("button", { type: "button", onclick: () => upload() }, "Upload and pack");
  const data = h("fieldset", {}, h("legend", {}, "2. Your data"),
    field("file", "Data file (.csv, .jsonl, or .zip of class folders)", fileInput,
      `At most ${Math.round(setup.max_upload_bytes / 2 ** 20)} MiB. Without a file the template's bundled dataset is used.`),
    field("label-column", "Label column (CSV only; default: the last column)", labelColumn),
    field("keep-columns", "Columns to keep even if they look like ids (CSV only; comma-separated)", keepColumns,
      "A column unique per row (an id) is left out unless named here, as with data pack --keep-columns."),
    field("task-kind", "What to learn of the label column (CSV only)", taskKind),
    h("div", { class: "choice" }, privateBox, h("label", { for: "private" },
      "Private: encrypt the data; only the task's members and validators get its key ",
      "(the default, as with trolly-wallet data pack). Not encrypted: the label names, a CSV's column names, the ",
      "image size and the number of samples, which the dataset's manifest names in clear for anyone who fetches it")),
    uploadButton, packBox);

  const budget = h("input", { type: "text", name: "budget", value: "50trl", inputmode: "decimal", autocomplete: "off" });
  const workers = h("input", { type: "number", name: "workers", value: "1", min: "1", max: "64" });
  const rounds = h("input", { type: "number", name: "rounds", value: String(setup.templates[0].rounds), min: "1", max: "50" });
  for (const input of [budget, workers, rounds]) input.addEventListener("input", () => schedulePlan());
  const terms = h("fieldset", {}, h("legend", {}, "3. Budget, workers and rounds"),
    field("budget", "Budget (what you escrow; the unspent part is refunded)", budget, "e.g. 50trl or 50000000utrl"),
    field("workers", "Workers", workers), field("rounds", "Rounds", rounds),
    h("h3", {}, "Cost and collateral"), costBox);

  const key = h("select", { name: "key" }, setup.keys.map((k) => h("option", { value: k.name }, `${k.name} (${k.address})`)));
  const password = h("input", { type: "password", name: "password", autocomplete: "current-password" });
  const submit = h("button", { type: "submit", disabled: true }, "Sign and submit the task");
  const sign = h("fieldset", {}, h("legend", {}, "4. Review, unlock and sign"), reviewBox,
    setup.keys.length ? field("key", "Key that pays (from this computer's keyring)", key)
      : notice("The keyring has no key: create one on the Provide compute page or with trolly-wallet keys add.", "error"),
    field("password", "Keyring password (used once to sign, never stored)", password,
      setup.keyring_backend === "test" ? "This console signs with a test keyring (a localnet's): it has no password "
        + "and its keys are stored unencrypted; any text here signs." : ""),
    submit, result);

  const form = h("form", { id: "new-task-form", novalidate: true, onsubmit: (event) => { event.preventDefault(); send(); } },
    templates, data, terms, sign);

  function template() { return form.querySelector("input[name=template]:checked").value; }
  function forgetPack() { state.pack = null; packBox.textContent = "No file uploaded: the template's bundled dataset will be used."; }
  function updateTemplate() {
    const chosen = setup.templates.find((t) => t.key === template());
    rounds.value = String(chosen.rounds);
    showFieldError("file", "");
    schedulePlan();
  }
  function terms_() {
    return { template: template(), pack: state.pack ? state.pack.pack : "", budget: budget.value,
      workers: workers.value, rounds: rounds.value };
  }
  function showRefusal(error, fallback) {
    const id = { file: "file", budget: "budget", workers: "workers", rounds: "rounds", template: "template",
      key: "key", password: "password" }[error.body && error.body.field] || fallback;
    return showAt(id, error);
  }
  function showAt(id, error) {
    if (id === "template") {
      const box = document.getElementById("template-error");
      box.hidden = false; box.textContent = `Problem: ${error.message}`;
    } else if (!showFieldError(id, error.message)) {
      result.replaceChildren(notice(error.message, "error"));
    }
    return id;
  }
  function clearErrors() {
    for (const id of ["file", "budget", "workers", "rounds", "key", "password"]) showFieldError(id, "");
    document.getElementById("template-error").hidden = true;
  }

  async function upload() {
    clearErrors();
    if (!fileInput.files.length) { showFieldError("file", "choose a file first"); return; }
    const body = new FormData();
    body.append("template", template());
    body.append("file", fileInput.files[0]);
    if (labelColumn.value.trim()) body.append("label_column", labelColumn.value.trim());
    if (keepColumns.value.trim()) body.append("keep_columns", keepColumns.value.trim());
    body.append("task", taskKind.value);
    body.append("private", privateBox.checked ? "on" : "off");
    packBox.textContent = "Packing…";
    uploadButton.disabled = true;
    try {
      state.pack = await postForm("/api/new-task/upload", body);
      const p = state.pack;
      packBox.replaceChildren(h("p", {}, `Packed ${fileInput.files[0].name}: ${FORMATS[p.context ? "tokens" : p.format]}.`),
        facts([p.target ? ["predicts", `${p.target.column} (a number)`] : ["labels", p.labels.join(", ")], ["training samples", String(p.train_samples)],
          ["held-out samples", String(p.test_samples)], ["features per sample", String(p.input_size)],
          ["private", p.private ? "yes (encrypted)" : "no"], ["manifest hash", p.manifest_hash]]),
        ...(p.columns ? columnReport(p) : []));
      schedulePlan();
    } catch (error) {
      forgetPack();
      packBox.textContent = "Not packed: see the problem beside the file.";
      showRefusal(error, "file");
    } finally {
      uploadButton.disabled = false;
    }
  }

  function schedulePlan() {
    clearTimeout(state.planTimer);
    state.planTimer = setTimeout(plan, 250);
  }
  async function plan() {
    const seq = ++state.planSeq;
    try {
      const answer = await getJson(`/api/new-task/plan?${new URLSearchParams(terms_())}`);
      if (seq !== state.planSeq) return;
      clearPlanError();
      const p = answer.plan;
      costBox.replaceChildren(facts([["data", answer.data], ["rounds", String(p.rounds)],
        ["workers", String(p.workers)], ["reward per round", utrl(p.reward_per_round)],
        ["cost (rounds × reward + fees)", utrl(p.cost)], ["budget", utrl(p.budget)],
        ["refunded if every round is paid", utrl(p.refund_if_all_paid)],
        ["collateral per worker", `${utrl(p.collateral)} (the chain's minimum)`],
        ["checked segments", `${p.samples_per_worker} of ${p.segments_per_round} per worker per round`]]));
      costBox.dataset.cost = String(p.cost);
      const chosen = setup.templates.find((t) => t.key === template());
      reviewBox.replaceChildren(h("h3", {}, "The task you are about to pay for"), facts([["template", chosen.title],
        ["data", `${answer.data}${answer.private ? " (private: encrypted, keys delivered by this console)" : ""}`],
        ["workers", String(p.workers)], ["rounds", String(p.rounds)], ["budget escrowed", utrl(p.budget)],
        ["cost", utrl(p.cost)], ["each worker locks", utrl(p.collateral)],
        ["spec", `${answer.spec_bytes} bytes, checked by the chain's rules`]]));
      submit.disabled = false;
    } catch (error) {
      if (seq !== state.planSeq) return;
      costBox.textContent = "No cost yet: see the problem above.";
      reviewBox.textContent = "Nothing to sign yet: fix the problem shown above.";
      submit.disabled = true;
      delete costBox.dataset.cost;
      clearPlanError();
      state.planError = showRefusal(error, "budget");
    }
  }
  // Only the plan's own refusal is cleared by the next plan: an upload's refusal beside the file stays.
  function clearPlanError() {
    if (state.planError === "template") document.getElementById("template-error").hidden = true;
    else if (state.planError) showFieldError(state.planError, "");
    state.planError = null;
  }

  async function send() {
    clearErrors();
    result.textContent = "Signing and sending…";
    submit.disabled = true;
    try {
      const sent = await postJson("/api/new-task/submit", { ...terms_(), key: key.value, password: password.value });
      result.replaceChildren(h("p", { class: "notice" }, `Task ${sent.task_id} submitted in block ${sent.height} `,
        `(transaction ${sent.hash}). The console serves its data at ${sent.data_url} while it runs. `,
        link(`#/tasks/${sent.task_id}`, `Follow task ${sent.task_id}`)));
      result.dataset.taskId = String(sent.task_id);
    } catch (error) {
      result.textContent = "";
      showRefusal(error, "password");
    } finally {
      password.value = "";
      submit.disabled = false;
    }
  }

  schedulePlan();
  return { page: [h("h1", {}, "New task, no code"), h("p", {}, "Train a model on your data: the network's workers ",
    "train it, validators check their work, and you pay only for verified rounds."), form], static: true };
}

// What packing did to each column of a CSV (`PackedDataset.summary()["columns"]`), its statistics taken from the
// training rows alone: numbers standardized, words one-hot, missing cells filled, ids left out.
function columnReport(p) {
  return [h("p", {}, `Each column as packed (statistics from the training samples only; `
    + `${p.imputed_cells} missing cell${p.imputed_cells === 1 ? "" : "s"} filled):`),
  table("What packing did per column", ["column", "kind", "what was done", "features", "missing cells filled"],
    p.columns.map((c) => [c.column, c.kind, c.done, String(c.features),
      c.imputed ? `${c.imputed} (with the ${c.imputed_with})` : "none"]))];
}
