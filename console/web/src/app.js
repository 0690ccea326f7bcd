// The console's pages: a hash router over the server's JSON API, live updates from its server-sent events.
// Each page is a module under pages/; a page that holds a form (`static`) is not redrawn by a live update
// (that would lose what was typed) but may refresh its own parts (`live`).
import { postJson, startSession } from "./api.js";
import { h, notice } from "./dom.js";
import { computePage } from "./pages/compute.js";
import { governancePage } from "./pages/governance.js";
import { networkPage } from "./pages/network.js";
import { newTaskPage } from "./pages/new_task.js";
import { proposalPage } from "./pages/proposal.js";
import { searchPage } from "./pages/search.js";
import { taskPage, tasksPage } from "./pages/tasks.js";
import { walletPage } from "./pages/wallet.js";

const main = document.getElementById("main");
const statusBox = document.getElementById("node-status");
let lastHeight = -1;
let rendering = false;
let shown = null; // the hash and data of the page on screen: a live update that changes nothing redraws nothing
let current = null; // the page on screen

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
  if (path === "/new-task") return () => newTaskPage();
  if (path === "/wallet") return () => walletPage();
  if (path === "/compute") return () => computePage();
  const proposal = path.match(/^\/governance\/(\d+)$/);
  if (proposal) return () => proposalPage(proposal[1]);
  if (path === "/governance") return () => governancePage();
  if (path === "/search") return () => searchPage(params);
  return () => networkPage();
}

async function render({ live = false } = {}) {
  if (rendering) return;
  if (live && current && current.static) {
    if (current.live) await current.live().catch(() => {});
    return;
  }
  rendering = true;
  try {
    const result = await route()();
    if (result === null) return;
    const key = `${location.hash} ${JSON.stringify(result.data || null)}`;
    if (live && key === shown) return;
    shown = key;
    current = result;
    main.replaceChildren(...result.page.flat(2));
    main.dataset.loaded = location.hash || "#/network";
    if (result.after) result.after();
    if (!live) main.focus();
  } catch (error) {
    shown = null;
    current = null;
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
  try {
    const body = await postJson("/api/cache/refresh", {});
    showNode(body.node);
    current = null;
    await render();
  } catch (error) {
    main.prepend(notice(error.message, "error"));
  }
}

document.getElementById("search").addEventListener("submit", (event) => {
  event.preventDefault();
  const query = document.getElementById("search-input").value.trim();
  if (query) location.hash = `#/search?q=${encodeURIComponent(query)}`;
});
document.getElementById("refresh").addEventListener("click", refresh);
window.addEventListener("hashchange", () => { current = null; render(); });

(async () => {
  await startSession();
  follow();
  await render();
})();
