// The Tasks list, and a task's page: terms, members with pay and slashes, the chart of held-out loss and
// accuracy per verified round (computed by the console in the background), every round's commitments,
// sampled segments, committees and votes, and the model's download once the task completed.
import { getJson, postJson } from "../api.js";
import { facts, h, link, mono, short, table, utrl } from "../dom.js";
import { baselineSection } from "./baseline.js";
import { drawRoundChart } from "./round_chart.js";

export async function tasksPage(params) {
  const after = Number(params.get("after") || 0);
  const data = await getJson(`/api/tasks?after=${after}`);
  const rows = data.tasks.map((t) => [link(`#/tasks/${t.id}`, `Task ${t.id}`), t.status, t.phase,
    `${t.round} of ${t.rounds}`, `${t.workers_joined} of ${t.workers_wanted}`, utrl(t.budget),
    utrl(t.escrow_remaining), mono(short(t.requester, 16))]);
  const pager = h("nav", { "aria-label": "Task pages" },
    after ? link("#/tasks", "First page") : null, " ",
    data.next !== null ? link(`#/tasks?after=${data.next}`, "Next page") : null);
  return { data, page: [h("h1", {}, "Tasks"),
    table(after ? `Tasks after ${after}` : "Tasks", ["task", "status", "phase", "round", "workers", "budget",
      "escrow left", "requester"], rows, "no tasks yet."),
    h("p", { class: "proof" }, `This page ${data.proof.note}: complete (app hash ${short(data.proof.app_hash, 16)} `
      + `of block ${data.proof.header_height}).`), pager] };
}

export async function taskPage(taskId) {
  const t = await getJson(`/api/tasks/${taskId}`);
  // A POST: asking for the chart starts its evaluation job (reading it with a GET starts nothing).
  const chart = await postJson(`/api/tasks/${taskId}/chart`, {}).catch((error) => ({ points: [], state: "stopped",
    progress: "", problem: error.message }));
  const members = table("Members", ["index", "worker", "status", "collateral", "paid", "penalized", "slashed",
    "rounds passed", "reason"], t.members.map((m) => [String(m.index), mono(m.worker),
    m.status, utrl(m.collateral), utrl(m.paid), utrl(m.penalized), utrl(m.slashed), String(m.rounds_passed),
    m.reason || "–"]), "nobody has joined yet.");
  const rounds = t.round_details.map((r) => h("section", { "aria-labelledby": `round-${r.round}` },
    h("h3", { id: `round-${r.round}` }, r.final_report ? `Round ${r.round} (final report)` : `Round ${r.round}`),
    facts([["start weights", mono(r.start_weights_hash || "not agreed yet")],
      ["proof", `commitments and votes ${r.proof.note} (${r.proof.pages} page${r.proof.pages === 1 ? "" : "s"})`]]),
    r.commitments.length ? r.commitments.map((c) => commitment(c)) : h("p", {}, "No commitments yet.")));
  const chartBox = h("div", { id: "round-chart", role: "img",
    "aria-label": "Held-out loss and accuracy after each verified round (the same numbers are in the table below)" });
  const model = t.final_weights_hash ? modelDownload(t.id)
    : h("p", {}, "The model can be downloaded here once the task has completed.");
  return { data: { t, chart }, page: [
    h("h1", {}, `Task ${t.id}`),
    facts([["status", t.status], ["phase", t.phase], ["round", `${t.round} of ${t.rounds}`],
      ["progress", t.progress], ["requester", mono(t.requester)],
      ["budget", utrl(t.budget)], ["escrow remaining", utrl(t.escrow_remaining)],
      ["reward per round", utrl(t.reward_per_round)], ["collateral", utrl(t.collateral)],
      ["paid to workers", utrl(t.paid_workers)], ["paid in verifier fees", utrl(t.paid_fees)],
      ["refunded", utrl(t.refunded)], ["final weights", mono(t.final_weights_hash || "–")],
      ["proof", `${t.proof.note} (app hash ${short(t.proof.app_hash, 16)} of block ${t.proof.header_height})`]]),
    h("h2", {}, "Model"), model, baselineSection(chart),
    h("section", { "aria-labelledby": "chart-title" },
      h("h2", { id: "chart-title" }, "Held-out loss and accuracy per verified round"),
      h("p", { id: "chart-progress", role: "status" }, chartStatus(chart)),
      chartBox,
      table("Held-out evaluation per round", ["weights", "loss", "accuracy", "matches the chain"],
        chart.points.map((p) => [`W_${p.round}${p.round === 0 ? " (initial)" : ` (after round ${p.round - 1})`}`,
          p.loss.toFixed(4), p.accuracy === null ? "– (regression)" : p.accuracy.toFixed(4),
          p.matches_chain === null ? "not recorded" : p.matches_chain ? "yes" : "NO"]),
        "nothing evaluated yet.")),
    h("h2", {}, "Members, payments and slashes"), members,
    h("h2", {}, "Rounds"), rounds.length ? rounds : h("p", {}, "The task has not started."),
  ], after: () => drawRoundChart(chartBox, chart.points) };
}

// The model is fetched and checked by a POST (the console fetches it once), then downloaded by a GET that only
// reads what was fetched.
function modelDownload(taskId) {
  const outcome = h("span", { id: "model-outcome", role: "status" });
  const anchor = h("a", { href: `/api/tasks/${taskId}/model`, download: `task-${taskId}-model.zip`,
    id: "model-download", onclick: async (event) => {
      event.preventDefault();
      outcome.textContent = " Fetching and checking the model…";
      try {
        const fetched = await postJson(`/api/tasks/${taskId}/model`, {});
        outcome.textContent = "";
        window.location.assign(fetched.download);
      } catch (error) {
        outcome.textContent = ` ${error.message}`;
      }
    } }, "Download the model (zip: model.safetensors, spec.json, labels.json; a table's preprocessing.json)");
  return h("p", {}, anchor, outcome);
}

function chartStatus(chart) {
  if (chart.state === "running") return `Evaluating: ${chart.progress || "starting"}`;
  if (chart.state === "stopped") return `Evaluation stopped: ${chart.problem}`;
  if (chart.state === "done") return `Every round evaluated (${chart.points.length - 1} rounds).`;
  if (chart.points.length > 1) return `${chart.points.length - 1} verified round(s) evaluated; waiting for the next.`;
  return chart.points.length ? "The initial weights W_0 are evaluated; waiting for the first verified round."
    : "Nothing evaluated yet; waiting for the first verified round.";
}

function commitment(c) {
  const segments = c.segments.map((segment, i) => {
    const votes = c.verdicts.filter((v) => v.segment === segment);
    return [String(segment), c.decisions[i], c.committees[i].map((v) => short(v, 14)).join(", ") || "–",
      votes.map((v) => `${short(v.validator, 14)}: ${v.verdict}${v.replay_digest ? " (revealed)" : ""}`).join("; ")
        || (c.verdicts_deleted ? "deleted when the reveal window closed" : "no votes yet"),
      decidedBy(c, i)];
  });
  return h("article", { class: "commitment" },
    h("h4", {}, `Commitment of ${short(c.worker, 20)}: ${c.outcome}`),
    facts([["update", mono(c.update_hash)], ["samples", String(c.samples_processed)],
      ["steps", String(c.steps)], ["checkpoints", String(c.num_checkpoints)], ["paid", utrl(c.paid)],
      ["held verifier fee", utrl(c.held_verifier_fee)]]),
    table("Sampled segments, committees and verdicts", ["segment", "decision", "committee", "votes", "escalated"],
      segments, "not sampled yet."));
}

// Who decides a sampled segment: `escalated` and `drawn` are per segment, in the order of `segments`.
function decidedBy(c, i) {
  if (c.escalated[i]) return "yes: the whole validator set decides (two thirds of its power)";
  const drawn = (c.drawn || [])[i];
  return drawn ? `no: its ${drawn} drawn member${drawn === 1 ? "" : "s"} decide, unanimously`
    : "no: its committee decides, unanimously";
}
