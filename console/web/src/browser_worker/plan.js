// The browser worker's decision, compute/worker/plan.py's in JavaScript: given the chain's view of a task
// (market_reads.js), what this worker does next. The chain is the clock; the tab asks again after each action.
//
//   task ended, or we are not an active member any more     FINISH (with the reason)
//   task open, waiting for workers                          WAIT
//   joined as a replacement, before its first round         WAIT
//   commit phase of round r < R, we have not committed      TRAIN r  (train, encode, publish, commit)
//   commit phase of round R (the final report)              REPORT_FINAL R  (publish W_R, commit its hash)
//   committed, or sampling / verification of round r        WAIT

import { memberOf, roundOf } from "./market_reads.js";

export const WAIT = "wait";
export const TRAIN = "train";
export const REPORT_FINAL = "report_final";
export const FINISH = "finish";

// chain/market/records.py's vocabulary, as the task query's JSON spells it
export const OPEN = "open";
export const RUNNING = "running";
export const ACTIVE = "active";
export const PASSED = "passed";
const LIVE_STATUSES = [OPEN, RUNNING];
const COMMIT_PHASE = "commit";

export function committedOnChain(view, roundIndex, address) {
  const detail = roundOf(view, roundIndex);
  return detail !== undefined && detail.commitments.some((commitment) => commitment.worker === address);
}

/** Whether a task takes a JoinTask now: open with a place left, or running with a slot open to a replacement
 * while a training round is left after the current one (docs/protocol.md 4.1c). */
export function takesWorkers(summary) {
  if (summary.status === OPEN) return summary.workers_joined < summary.workers_wanted;
  return summary.status === RUNNING && summary.open_slots > 0 && summary.round + 1 < summary.rounds &&
    summary.replacements < summary.workers_wanted;
}

/** {kind, round, reason} for the worker at `address` in `view`. */
export function decide(view, address) {
  const member = memberOf(view, address);
  if (member === undefined) return { kind: FINISH, round: -1, reason: "not a member of the task" };
  if (!LIVE_STATUSES.includes(view.status)) return { kind: FINISH, round: -1, reason: `task ${view.status}` };
  if (member.status !== ACTIVE) {
    return { kind: FINISH, round: -1, reason: `${member.status}: ${member.reason || "no reason given"}` };
  }
  if (view.status === OPEN) {
    return { kind: WAIT, round: -1, reason: `waiting for workers (${view.workers_joined} of ${view.workers_wanted})` };
  }
  const round = view.round;
  if (round < member.first_round) {
    return { kind: WAIT, round, reason: `replacement: trains from round ${member.first_round}` };
  }
  if (view.phase === COMMIT_PHASE) {
    if (committedOnChain(view, round, address)) {
      return { kind: WAIT, round, reason: `round ${round} committed, waiting for the others` };
    }
    if (round === view.rounds) return { kind: REPORT_FINAL, round, reason: "final report" };
    return { kind: TRAIN, round, reason: `round ${round}` };
  }
  return { kind: WAIT, round, reason: `round ${round}: ${view.phase}` };
}
