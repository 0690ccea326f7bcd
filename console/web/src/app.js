// The console's pages: a hash router over the server's JSON API, live updates from its server-sent events.
// Everything is built with DOM calls (never innerHTML), so nothing the chain says is read as markup.
import uPlot from "uplot";

const main = document.getElementById("main");
const statusBox = document.getElementById("node-status");
let csrfToken = null;
let lastHeight = -1;
let rendering = false;
let shown = null; // the hash and data of the page on screen: a live update that changes nothing redraws nothing

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const utrl = (amount) => `${(Number(amount) / 1e6).toLocaleString("en", { maximumFractionDigits: 6 })} TRL`;
const short = (text, n = 12) => (text && text.length > n + 3 ? `${text.slice(0, n)}…` : text || "–");
const link = (href, text) => h("a", { href }, text);
const yesNo = (flag) => (flag ? "yes" : "no");

function table(caption, headers, rows, empty = "None.") {
  if (!rows.length) return h("p", {}, `${caption}: ${empty}`);
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell))))));
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw Object.assign(new Error(body.error || `HTTP ${response.status}`), { body });
  return body;
}

function showNode(state) {
  statusBox.classList.toggle("down", !state.up);
  statusBox.textContent = state.up
    ? `Node up: height ${state.height} (${state.chain_id})`
    : `Node DOWN: last height seen ${state.last_height || "none"} (${state.error})`;
  statusBox.dataset.up = state.up ? "yes" : "no";
}

function problem(error) {
  const node = error.body && error.body.node;
  if (node) showNode(node);
  return h("div", { class: "notice error", role: "alert" },
    error.message,
    node && !node.up ? ` The node is down; the last height seen was ${node.last_height || "none"}.` : "");
}

// ---- pages ---------------------------------------------------------------------------------------------

async function networkPage() {
  const data = await getJson("/api/network");
  const s = data.status;
  const chart = h("div", { id: "tx-chart", role: "img",
    "aria-label": "Transactions per block over the recent blocks (the same numbers are in the blocks table)" });
  const page = [
    h("h1", {}, "Network"),
    facts([["chain", s.chain_id], ["height", String(s.latest_block_height)],
      ["latest block time", s.latest_block_time],
      ["mean block interval", data.block_time_seconds === null ? "–" : `${data.block_time_seconds} s`]]),
    table("Validators", ["moniker", "operator", "stake", "power", "jailed"],
      data.validators.map((v) => [v.moniker, h("span", { class: "mono" }, v.operator), utrl(v.stake),
        String(v.power), yesNo(v.jailed)])),
    h("section", { "aria-labelledby": "blocks-title" }, h("h2", { id: "blocks-title" }, "Recent blocks"), chart,
      table("Recent blocks", ["height", "time", "transactions", "hash"],
        data.blocks.map((b) => [String(b.height), b.time, String(b.txs), h("span", { class: "mono" }, short(b.hash, 16))]))),
    table("Recent transactions", ["hash", "height", "result", "messages"],
      data.txs.map((tx) => [link(`#/search?q=${tx.hash}`, short(tx.hash, 16)), String(tx.height),
        tx.code === 0 ? "ok" : `refused (code ${tx.code})`, txKinds(tx)]), "none in the recent blocks."),
  ];
  return { page, data, after: () => drawTxChart(chart, data.blocks) };
}

function txKinds(tx) {
  return tx.body ? tx.body.messages.map((m) => m.type.split(".").pop()).join(", ") : "(engine)";
}

function drawTxChart(target, blocks) {
  if (blocks.length < 2) return;
  const ordered = [...blocks].reverse();
  const options = { width: Math.min(640, target.clientWidth || 640), height: 180, legend: { show: false },
    scales: { x: { time: false } }, axes: [{ label: "height" }, { label: "transactions" }],
    series: [{}, { label: "transactions", stroke: "#333", width: 2, points: { show: true } }] };
  new uPlot(options, [ordered.map((b) => b.height), ordered.map((b) => b.txs)], target);
}

async function tasksPage(params) {
  const after = Number(params.get("after") || 0);
  const data = await getJson(`/api/tasks?after=${after}`);
  const rows = data.tasks.map((t) => [link(`#/tasks/${t.id}`, `Task ${t.id}`), t.status, t.phase,
    `${t.round} of ${t.rounds}`, `${t.workers_joined} of ${t.workers_wanted}`, utrl(t.budget),
    utrl(t.escrow_remaining), h("span", { class: "mono" }, short(t.requester, 16))]);
  const pager = h("nav", { "aria-label": "Task pages" },
    after ? link("#/tasks", "First page") : null, " ",
    data.next !== null ? link(`#/tasks?after=${data.next}`, "Next page") : null);
  return { data, page: [h("h1", {}, "Tasks"),
    table(after ? `Tasks after ${after}` : "Tasks", ["task", "status", "phase", "round", "workers", "budget",
      "escrow left", "requester"], rows, "no tasks yet."), pager] };
}

async function taskPage(taskId) {
  const t = await getJson(`/api/tasks/${taskId}`);
  const members = table("Members", ["index", "worker", "status", "collateral", "paid", "penalized", "slashed",
    "rounds passed", "reason"], t.members.map((m) => [String(m.index), h("span", { class: "mono" }, m.worker),
    m.status, utrl(m.collateral), utrl(m.paid), utrl(m.penalized), utrl(m.slashed), String(m.rounds_passed),
    m.reason || "–"]), "nobody has joined yet.");
  const rounds = t.round_details.map((r) => h("section", { "aria-labelledby": `round-${r.round}` },
    h("h3", { id: `round-${r.round}` }, r.final_report ? `Round ${r.round} (final report)` : `Round ${r.round}`),
    facts([["start weights", h("span", { class: "mono" }, r.start_weights_hash || "not agreed yet")]]),
    r.commitments.length ? r.commitments.map((c) => commitment(c)) : h("p", {}, "No commitments yet.")));
  return { data: t, page: [
    h("h1", {}, `Task ${t.id}`),
    facts([["status", t.status], ["phase", t.phase], ["round", `${t.round} of ${t.rounds}`],
      ["progress", t.progress], ["requester", h("span", { class: "mono" }, t.requester)],
      ["budget", utrl(t.budget)], ["escrow remaining", utrl(t.escrow_remaining)],
      ["reward per round", utrl(t.reward_per_round)], ["collateral", utrl(t.collateral)],
      ["paid to workers", utrl(t.paid_workers)], ["paid in verifier fees", utrl(t.paid_fees)],
      ["refunded", utrl(t.refunded)], ["final weights", h("span", { class: "mono" }, t.final_weights_hash || "–")]]),
    h("h2", {}, "Members, payments and slashes"), members,
    h("h2", {}, "Rounds"), rounds.length ? rounds : h("p", {}, "The task has not started."),
  ] };
}

function commitment(c) {
  const segments = c.segments.map((segment, i) => {
    const votes = c.verdicts.filter((v) => v.segment === segment);
    return [String(segment), c.decisions[i], c.committees[i].map((v) => short(v, 14)).join(", ") || "–",
      votes.map((v) => `${short(v.validator, 14)}: ${v.verdict}${v.replay_digest ? " (revealed)" : ""}`).join("; ") || "no votes yet",
      c.escalated.includes(segment) ? "yes" : "no"];
  });
  return h("article", { class: "commitment" },
    h("h4", {}, `Commitment of ${short(c.worker, 20)}: ${c.outcome}`),
    facts([["update", h("span", { class: "mono" }, c.update_hash)], ["samples", String(c.samples_processed)],
      ["steps", String(c.steps)], ["checkpoints", String(c.num_checkpoints)], ["paid", utrl(c.paid)],
      ["held verifier fee", utrl(c.held_verifier_fee)]]),
    table("Sampled segments, committees and verdicts", ["segment", "decision", "committee", "votes", "escalated"],
      segments, "not sampled yet."));
}

async function searchPage(params) {
  const query = params.get("q") || "";
  document.getElementById("search-input").value = query;
  const found = await getJson(`/api/search?q=${encodeURIComponent(query)}`);
  if (found.kind === "task") { location.hash = `#/tasks/${found.task_id}`; return null; }
  const page = [h("h1", {}, "Search"), h("p", {}, `Results for “${query}”:`)];
  if (found.kind === "none") page.push(h("p", { class: "notice" }, `Nothing found: ${found.reason}.`));
  if (found.kind === "tx") {
    const tx = found.tx;
    page.push(h("h2", {}, "Transaction"), facts([["hash", h("span", { class: "mono" }, tx.hash)],
      ["height", String(tx.height)], ["result", tx.code === 0 ? "ok" : `refused (code ${tx.code}): ${tx.log}`],
      ["signer", tx.body ? h("span", { class: "mono" }, tx.body.signer) : "–"],
      ["fee", tx.body ? utrl(tx.body.fee) : "–"], ["messages", txKinds(tx)]]));
  }
  if (found.kind === "address") {
    page.push(h("h2", {}, "Account"), facts([["address", h("span", { class: "mono" }, found.account.address)],
      ["balance", utrl(found.account.balance)], ["nonce", String(found.account.nonce)],
      ["validator", found.validator ? `${found.validator.moniker}, power ${found.validator.power}, jailed ${yesNo(found.validator.jailed)}` : "no"],
      ["worker", found.worker ? (found.worker.registered ? `registered, stake ${utrl(found.worker.stake)}` : "unbonding") : "no"]]));
    if (found.worker && found.worker.registered) {
      page.push(h("p", {}, "Tasks: ", found.worker.tasks.length
        ? found.worker.tasks.flatMap((id, i) => [i ? ", " : "", link(`#/tasks/${id}`, `Task ${id}`)]) : "none"));
    }
  }
  return { page };
}

// ---- router and live updates -----------------------------------------------------------------------------

function route() {
  const [path, query = ""] = (location.hash.slice(1) || "/network").split("?");
  const params = new URLSearchParams(query);
  for (const a of document.querySelectorAll("nav a")) {
    const current = path.startsWith(a.getAttribute("href").slice(1));
    if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const task = path.match(/^\/tasks\/(\d+)$/);
  if (task) return () => taskPage(task[1]);
  if (path === "/tasks") return () => tasksPage(params);
  if (path === "/search") return () => searchPage(params);
  return () => networkPage();
}

async function render({ live = false } = {}) {
  if (rendering) return;
  rendering = true;
  try {
    const result = await route()();
    if (result === null) return;
    const key = `${location.hash} ${JSON.stringify(result.data || null)}`;
    if (live && key === shown) return;
    shown = key;
    main.replaceChildren(...result.page.flat(2));
    main.dataset.loaded = location.hash || "#/network";
    if (result.after) result.after();
    if (!live) main.focus();
  } catch (error) {
    shown = null;
    main.replaceChildren(h("h1", {}, "Not shown"), problem(error));
    main.dataset.loaded = "error";
  } finally {
    rendering = false;
  }
}

function follow() {
  const stream = new EventSource("/api/events");
  stream.addEventListener("node", (event) => {
    const state = JSON.parse(event.data);
    showNode(state);
    if (state.up && state.height !== lastHeight) {
      const first = lastHeight < 0;
      lastHeight = state.height;
      if (!first && !location.hash.startsWith("#/search")) render({ live: true });
    }
  });
}

async function refresh() {
  const response = await fetch("/api/cache/refresh", { method: "POST", headers: { "X-CSRF-Token": csrfToken } });
  const body = await response.json();
  if (response.ok) { showNode(body.node); await render(); } else main.prepend(problem(new Error(body.error)));
}

document.getElementById("search").addEventListener("submit", (event) => {
  event.preventDefault();
  const query = document.getElementById("search-input").value.trim();
  if (query) location.hash = `#/search?q=${encodeURIComponent(query)}`;
});
document.getElementById("refresh").addEventListener("click", refresh);
window.addEventListener("hashchange", () => render());

(async () => {
  csrfToken = (await getJson("/api/session")).csrf_token;
  follow();
  await render();
})();
