// The Governance page: the gov params, every proposal (its changes or "text", status, deposit against the minimum,
// deposit and voting end heights) with its tally, live while it votes and refreshed at every block as the Network
// page is; and the form that submits a proposal (param changes, one SECTION.KEY=VALUE a line, or text), previewed
// and confirmed with the keyring password. A proposal's own page (proposal.js) votes and deposits.
import { getJson } from "../api.js";
import { signingFlow } from "../confirm.js";
import { facts, field, h, link, notice, table, utrl } from "../dom.js";

export const OPTIONS = [["yes", "Yes"], ["no", "No"], ["abstain", "Abstain"], ["no_with_veto", "No with veto"]];
const OPTION_WORDS = { VOTE_OPTION_YES: "yes", VOTE_OPTION_NO: "no", VOTE_OPTION_ABSTAIN: "abstain",
  VOTE_OPTION_NO_WITH_VETO: "no-with-veto" };

export const percent = (part, whole) => (Number(whole) > 0 ? `${(100 * Number(part) / Number(whole)).toFixed(1)} %`
  : "–");
export const bps = (value) => `${(Number(value) / 100).toFixed(2)} %`;
export const changesText = (changes) => (changes.length
  ? changes.map((c) => `${c.section}.${c.key}=${c.value}`).join(", ") : "text (no param change)");
export const statusText = (status) => status.replace("_", " ");

// A governance message as the review shows it (the console answers protobuf's JSON: 64-bit numbers as text, enum
// names, defaults left out).
export function describeGov(message) {
  const f = message.fields;
  const kind = message.type.split(".").pop();
  if (kind === "MsgVote") return `vote ${OPTION_WORDS[f.option] || f.option} on proposal ${f.proposal_id}`;
  if (kind === "MsgDeposit") return `deposit ${utrl(f.amount || 0)} on proposal ${f.proposal_id}`;
  if (kind === "MsgSubmitProposal") {
    return `submit the proposal "${f.title}" (${changesText(f.changes || [])}) with a first deposit of ${
      utrl(f.initial_deposit || 0)}`;
  }
  return `${kind} ${JSON.stringify(f)}`;
}

// Turnout against the quorum: the share of the bonded stake that voted (abstain included).
export function turnout(tally, params) {
  if (!tally || !tally.tally) return "–";
  const t = tally.tally;
  return `${percent(t.voted, t.total_bonded)} of the bonded stake (quorum ${bps(params.quorum_bps)})`;
}

const share = (tally, option) => (tally && tally.tally
  ? `${utrl(tally.tally[option])} (${percent(tally.tally[option], tally.tally.voted)})` : "–");

function proposalsTable(data) {
  return h("div", {}, proposalsRows(data), h("p", { class: "proof" }, `Proposal listing ${data.proof.note}: `
    + `complete; params ${data.params_proof.note}; each live tally proved on its own.`));
}

function proposalsRows(data) {
  return table("Proposals", ["proposal", "title", "changes", "status", "deposit", "deposit ends", "voting ends",
    "yes", "no", "abstain", "no with veto", "turnout", "outcome"],
  data.proposals.slice().reverse().map((p) => [link(`#/governance/${p.id}`, `Proposal ${p.id}`), p.title,
    changesText(p.changes), statusText(p.status),
    `${utrl(p.total_deposit)} of ${utrl(data.params.min_deposit)}`, `height ${p.deposit_end_height}`,
    p.voting_end_height ? `height ${p.voting_end_height}` : "–",
    share(p.tally, "yes"), share(p.tally, "no"), share(p.tally, "abstain"), share(p.tally, "no_with_veto"),
    turnout(p.tally, data.params), p.tally ? p.tally.outcome || "–" : "not voting yet"]),
  "nobody has proposed anything yet.");
}

export function paramsFacts(params) {
  return facts([["minimum deposit", utrl(params.min_deposit)],
    ["deposit period", `${params.max_deposit_blocks} blocks`],
    ["voting period", `${params.voting_period_blocks} blocks`],
    ["quorum", `${bps(params.quorum_bps)} of the bonded stake`],
    ["pass threshold", `more than ${bps(params.threshold_bps)} of the non-abstaining votes`],
    ["veto threshold", `more than ${bps(params.veto_threshold_bps)} of the votes`]]);
}

export function keySelect(keys) {
  return h("select", { name: "key" }, keys.map((name) => h("option", { value: name }, name)));
}

export async function governancePage() {
  const data = await getJson("/api/gov");
  const listing = h("div", { id: "proposals" }, proposalsTable(data));
  const key = keySelect(data.keys);
  const kind = h("select", { name: "kind" }, h("option", { value: "params" }, "Parameter changes"),
    h("option", { value: "text" }, "Text (no change)"));
  const title = h("input", { type: "text", name: "title", autocomplete: "off" });
  const summary = h("textarea", { name: "summary", rows: 3, cols: 60 });
  const changes = h("textarea", { name: "changes", rows: 4, cols: 60, spellcheck: "false" });
  const deposit = h("input", { type: "text", name: "deposit", autocomplete: "off", inputmode: "decimal" });
  const changesField = field("changes", "Changes, one SECTION.KEY=VALUE a line", changes,
    "e.g. market.validator_fee_bps=300 (a section and key of `trolly-wallet query params`; the chain checks each)");
  kind.addEventListener("change", () => { changesField.hidden = kind.value !== "params"; });
  const review = h("div", { id: "gov-review", "aria-live": "polite" });
  const outcome = h("div", { id: "gov-outcome", role: "status", "aria-live": "polite" });
  const refreshList = async () => listing.replaceChildren(proposalsTable(await getJson("/api/gov")));
  const start = signingFlow({ api: "/api/gov", review, outcome, describe: describeGov,
    fields: { key: "gov-key", kind: "kind", title: "title", summary: "summary", changes: "changes",
      deposit: "deposit" },
    sent: async (result) => {
      outcome.append(notice(`Proposal ${result.proposal_id} submitted.`), h("p", {},
        link(`#/governance/${result.proposal_id}`, `Open proposal ${result.proposal_id}`)));
      await refreshList();
    } });
  const form = h("form", { id: "proposal-form", novalidate: true, onsubmit: (event) => {
    event.preventDefault();
    start({ action: "submit", key: key.value, kind: kind.value, title: title.value, summary: summary.value,
      changes: changes.value, deposit: deposit.value });
  } }, h("fieldset", {}, h("legend", {}, "Submit a proposal"),
    field("gov-key", "Key that signs", key), field("kind", "What it proposes", kind),
    field("title", "Title", title), field("summary", "Summary (optional)", summary), changesField,
    field("deposit", "First deposit", deposit,
      `e.g. 1trl; its vote starts once deposits reach ${utrl(data.params.min_deposit)}`),
    h("button", { type: "submit" }, "Review")));
  return {
    page: [h("h1", {}, "Governance"),
      h("p", {}, "Proposals change the chain's parameters, or only say something (a text proposal). A vote weighs ",
        "as the stake bonded behind it; a passed proposal's changes apply at the end of its vote."),
      h("section", { "aria-labelledby": "gov-params-title" }, h("h2", { id: "gov-params-title" }, "Rules"),
        paramsFacts(data.params)),
      listing, form, review, outcome],
    static: true,
    live: refreshList,
  };
}
