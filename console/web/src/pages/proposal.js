// A proposal's page: its periods, each change beside the param's value now, the tally (live while it votes,
// refreshed at every block), the votes and deposits; and its actions, vote (the four options) and deposit, each
// previewed and confirmed with the keyring password. The chain's refusal (a vote outside the voting period, a
// deposit on a decided proposal) is shown with its code and log.
import { getJson } from "../api.js";
import { signingFlow } from "../confirm.js";
import { facts, field, h, mono, table, utrl } from "../dom.js";
import { OPTIONS, bps, describeGov, keySelect, percent, statusText, turnout } from "./governance.js";

const OPTION_LABELS = Object.fromEntries(OPTIONS);

function tallyTable(p) {
  if (!p.tally || !p.tally.tally) {
    return h("p", { id: "tally" }, "Tally: none yet, the vote starts once the deposits reach the minimum.");
  }
  const t = p.tally.tally;
  const caption = p.tally.final ? "Final tally" : "Tally so far (live)";
  const outcome = (p.tally.outcome || "–").replace("if it ended now: ", "");
  return h("div", { id: "tally" }, table(caption, ["vote", "stake", "share of the votes"],
    [...OPTIONS.map(([option, label]) => [label, utrl(t[option]), percent(t[option], t.voted)]),
      ["turnout", utrl(t.voted), turnout(p.tally, p.params)]]),
  facts([[p.tally.final ? "outcome" : "if the vote ended now", outcome]]));
}

function state(p) {
  const changes = p.changes.length
    ? table("Changes", ["param", "value now", "proposed"], p.changes.map((c) => [mono(`${c.section}.${c.key}`),
      String(c.current ?? "–"), String(c.value)]))
    : h("p", {}, "A text proposal: it changes no param.");
  return [
    facts([["status", statusText(p.status)], ["proposer", mono(p.proposer)],
      ["submitted at", `height ${p.submit_height}`],
      ["deposit", `${utrl(p.total_deposit)} of the minimum ${utrl(p.params.min_deposit)}`],
      ["deposit period ends", `height ${p.deposit_end_height}`],
      ["voting", p.voting_end_height ? `heights ${p.voting_start_height} to ${p.voting_end_height}` : "not started"],
      ["height now", String(p.height)], ["proof", `${p.proof.note} (the proposal and its deposits); votes `
        + `${p.votes_proof.note}; params ${p.params_proof.note}${p.tally && p.tally.proof
          ? `; tally ${p.tally.proof.note}` : ""}`], ["quorum, threshold, veto", `${bps(p.params.quorum_bps)}, ${
        bps(p.params.threshold_bps)}, ${bps(p.params.veto_threshold_bps)}`]]),
    changes, tallyTable(p),
    table("Votes", ["voter", "vote"], p.votes.map((v) => [mono(v.voter), OPTION_LABELS[v.option] || v.option]),
      p.status === "voting_period" ? "nobody has voted yet." : "none kept (the chain keeps votes only while it votes)."),
    table("Deposits", ["depositor", "amount"], p.deposits.map((d) => [mono(d.depositor), utrl(d.amount)]),
      "none held (refunded or burned once decided)."),
  ];
}

export async function proposalPage(proposalId) {
  const p = await getJson(`/api/gov/proposals/${proposalId}`);
  const shown = h("div", { id: "proposal-state" }, state(p));
  const key = keySelect(p.keys);
  const option = h("select", { name: "option" }, OPTIONS.map(([value, label]) => h("option", { value }, label)));
  const amount = h("input", { type: "text", name: "amount", autocomplete: "off", inputmode: "decimal" });
  const review = h("div", { id: "gov-review", "aria-live": "polite" });
  const outcome = h("div", { id: "gov-outcome", role: "status", "aria-live": "polite" });
  const refresh = async () => shown.replaceChildren(...state(await getJson(`/api/gov/proposals/${proposalId}`)));
  const start = signingFlow({ api: "/api/gov", review, outcome, describe: describeGov, sent: refresh,
    fields: { key: "gov-key", option: "vote-option", amount: "deposit-amount" } });
  const action = (build) => (event) => {
    event.preventDefault();
    start({ key: key.value, proposal_id: p.id, ...build() });
  };
  return {
    page: [h("h1", {}, `Proposal ${p.id}: ${p.title}`), h("p", { id: "proposal-summary" }, p.summary || "No summary."),
      shown,
      h("section", { "aria-labelledby": "act-title" }, h("h2", { id: "act-title" }, "Vote or deposit"),
        field("gov-key", "Key that signs", key),
        h("form", { id: "vote-form", novalidate: true,
          onsubmit: action(() => ({ action: "vote", option: option.value })) },
        h("fieldset", {}, h("legend", {}, "Vote (a later vote replaces an earlier one)"),
          field("vote-option", "Your vote", option), h("button", { type: "submit" }, "Review vote"))),
        h("form", { id: "deposit-form", novalidate: true,
          onsubmit: action(() => ({ action: "deposit", amount: amount.value })) },
        h("fieldset", {}, h("legend", {}, "Deposit"),
          field("deposit-amount", "Amount to add", amount, "e.g. 1trl or 1000000utrl"),
          h("button", { type: "submit" }, "Review deposit")))),
      review, outcome],
    static: true,
    live: refresh,
  };
}
