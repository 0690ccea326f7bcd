// Search: a task id goes to its page; a transaction hash or an address is shown here.
import { getJson } from "../api.js";
import { facts, h, link, mono, short, utrl, yesNo } from "../dom.js";
import { txKinds } from "./network.js";

export async function searchPage(params) {
  const query = params.get("q") || "";
  document.getElementById("search-input").value = query;
  const found = await getJson(`/api/search?q=${encodeURIComponent(query)}`);
  if (found.kind === "task") { location.hash = `#/tasks/${found.task_id}`; return null; }
  const page = [h("h1", {}, "Search"), h("p", {}, `Results for “${query}”:`)];
  if (found.kind === "none") page.push(h("p", { class: "notice" }, `Nothing found: ${found.reason}.`));
  if (found.kind === "tx") {
    const tx = found.tx;
    page.push(h("h2", {}, "Transaction"), facts([["hash", mono(tx.hash)],
      ["height", String(tx.height)], ["result", tx.code === 0 ? "ok" : `refused (code ${tx.code}): ${tx.log}`],
      ["signer", tx.body ? mono(tx.body.signer) : "–"],
      ["fee", tx.body ? utrl(tx.body.fee) : "–"], ["messages", txKinds(tx)]]));
  }
  if (found.kind === "address") {
    const v = found.validator;
    page.push(h("h2", {}, "Account"), facts([["address", mono(found.account.address)],
      ["balance", utrl(found.account.balance)], ["nonce", String(found.account.nonce)],
      ["validator", v ? `${v.moniker}, power ${v.power}, jailed ${yesNo(v.jailed)}` : "no"],
      ["worker", found.worker ? (found.worker.registered ? `registered, stake ${utrl(found.worker.stake)}` : "unbonding") : "no"],
      ["proof", `${found.account.proof.note} (app hash ${short(found.account.proof.app_hash, 16)} of block `
        + `${found.account.proof.header_height})`]]));
    if (found.worker && found.worker.registered) {
      page.push(h("p", {}, "Tasks: ", found.worker.tasks.length
        ? found.worker.tasks.flatMap((id, i) => [i ? ", " : "", link(`#/tasks/${id}`, `Task ${id}`)]) : "none"));
    }
  }
  return { page };
}
