// The Network page: height, block interval, validators (stake, power, commission, delegators, missed blocks of the
// downtime window, jail state), recent blocks (a chart and a table), and users' recent transactions (the engine's
// per-block seed transaction is counted in the blocks, not listed).
import uPlot from "uplot";
import { getJson } from "../api.js";
import { facts, h, link, mono, short, table, utrl } from "../dom.js";

export function txKinds(tx) {
  return tx.body ? tx.body.messages.map((m) => m.type.split(".").pop()).join(", ") : "(engine)";
}

const percent = (bps) => `${(Number(bps) / 100).toFixed(2)} %`;

// A validator's commission: its rate, and the bounds it set at creation (the most, the most it changes a day).
export function commission(v) {
  return `${percent(v.commission_rate)} (max ${percent(v.max_rate)}, changes ≤ ${percent(v.max_change_rate)} a day)`;
}

// Whether a validator signs blocks: tombstoned (double-signed, for good), jailed until a height, or not jailed.
export function jailState(v) {
  if (v.tombstoned) return "tombstoned (jailed for good)";
  if (v.jailed) return v.jailed_until ? `jailed until height ${v.jailed_until}` : "jailed";
  return "not jailed";
}

export async function networkPage() {
  const data = await getJson("/api/network");
  const s = data.status;
  const chart = h("div", { id: "tx-chart", role: "img",
    "aria-label": "Transactions per block over the recent blocks (the same numbers are in the blocks table)" });
  const page = [
    h("h1", {}, "Network"),
    facts([["chain", s.chain_id], ["height", String(s.latest_block_height)],
      ["latest block time", s.latest_block_time],
      ["mean block interval", data.block_time_seconds === null ? "–" : `${data.block_time_seconds} s`]]),
    table("Validators", ["moniker", "operator", "stake", "power", "commission", "delegators", "missed blocks",
      "jail state", "proof"],
    data.validators.map((v) => [v.moniker, mono(v.operator), utrl(v.stake), String(v.power), commission(v),
      String(v.delegators), `${v.missed_blocks} of ${v.signed_blocks_window} (jailed above ${v.max_missed_blocks})`,
      jailState(v), `${v.proof.note}; liveness ${v.liveness_proof.note}`])),
    h("p", { class: "proof" }, `Validator listing ${data.validators_proof.note}: complete (app hash `
      + `${short(data.validators_proof.app_hash, 16)} of block ${data.validators_proof.header_height}).`),
    h("section", { "aria-labelledby": "blocks-title" }, h("h2", { id: "blocks-title" }, "Recent blocks"), chart,
      table("Recent blocks", ["height", "time", "transactions", "hash"],
        data.blocks.map((b) => [String(b.height), b.time, String(b.txs), mono(short(b.hash, 16))]))),
    table("Recent transactions", ["hash", "height", "signer", "result", "messages"],
      data.txs.map((tx) => [link(`#/search?q=${tx.hash}`, short(tx.hash, 16)), String(tx.height),
        tx.body ? link(`#/search?q=${tx.body.signer}`, short(tx.body.signer, 20)) : "–",
        tx.code === 0 ? "ok" : `refused (code ${tx.code})`, txKinds(tx)]), "no user has sent one yet."),
  ];
  return { page, data, after: () => drawTxChart(chart, data.blocks) };
}

function drawTxChart(target, blocks) {
  if (blocks.length < 2) return;
  const ordered = [...blocks].reverse();
  const options = { width: Math.min(640, target.clientWidth || 640), height: 180, legend: { show: false },
    scales: { x: { time: false } }, axes: [{ label: "height" }, { label: "transactions" }],
    series: [{}, { label: "transactions", stroke: "#333", width: 2, points: { show: true } }] };
  new uPlot(options, [ordered.map((b) => b.height), ordered.map((b) => b.txs)], target);
}
