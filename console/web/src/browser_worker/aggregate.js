// One follower of a task's global weights W_0, W_1, ..., as compute/weights_follower.py follows them:
//
//   W_0      initialWeights(spec, shape): the portable initialisation of a task allowing wasm32
//   W_{r+1}  aggregateRound(W_r, the updates of round r that PASSED verification)   (outer_step.js)
//
// derived here from updates fetched by hash and checked, never adopted from anyone; the chain's recorded start
// hash is only compared with (`disagreement`).
//
//   const follower = new WeightsFollower(spec, shape, { fetchUpdate });   // fetchUpdate(hash, update, members)
//   const { weights, momentum, hash } = await follower.state(3, view);     // -> Promise of bytes
//
// `view` is a task's whole view as the wallet's TaskView answers it (`members`, `round_details`: wallet/
// market_views.py), as assembled from the node's `/market/task/<id>` and its rounds' pages.

import { initialWeights } from "./initial_weights.js";
import { aggregateRound, initialState, RoundError, stateHash } from "./outer_step.js";
import { sha256Hex } from "./canonical_encode.js";

const PASSED = "passed";

/** A round's start cannot be derived: a passed update of the round before is served by nobody (or not as
 * committed), or the round is not on chain yet (compute/weights_follower.py's StartUnavailable). */
export class StartUnavailable extends Error {
  constructor(round, reason, missing = []) {
    super(`cannot derive W_${round}: ${reason}`);
    this.name = "StartUnavailable";
    this.round = round;
    this.missing = missing;
  }
}

function roundDetail(view, round) {
  return (view.round_details || []).find((detail) => detail.round === round) || null;
}

/** Where a member's blobs are fetched from: its relay's place for it, else its own blob URL. */
function fetchUrl(member) {
  return member.relay ? `${member.relay.replace(/\/+$/, "")}/workers/${member.worker}` : member.blob_url;
}

/** Every training commitment of a round with its member's index and blob URL, in worker-index order
 * (weights_follower.py's `round_updates`; the final report's round carries none). */
export function roundUpdates(view, round) {
  const detail = roundDetail(view, round);
  if (!detail || detail.final_report) return [];
  const members = new Map(view.members.map((member) => [member.worker, member]));
  return detail.commitments
    .filter((c) => members.has(c.worker) && c.update_hash)
    .map((c) => ({ worker: c.worker, workerIndex: members.get(c.worker).index, updateHash: c.update_hash,
      samplesProcessed: c.samples_processed, outcome: c.outcome, blobUrl: fetchUrl(members.get(c.worker)) }))
    .sort((a, b) => a.workerIndex - b.workerIndex);
}

export class WeightsFollower {
  constructor(spec, shape, { fetchUpdate }) {
    this.spec = spec;
    this.shape = shape;
    this.fetchUpdate = fetchUpdate;
    this.states = new Map(); // round -> state, each derived once
  }

  /** W_0, from the spec alone. */
  initial() {
    if (!this.states.has(0)) this.states.set(0, initialState(initialWeights(this.spec, this.shape)));
    return this.states.get(0);
  }

  /** W_round, its outer momentum and its hash, deriving every round not derived yet from the passed updates
   * `view` lists; StartUnavailable when one cannot be had as committed. */
  async state(round, view) {
    let known = round;
    while (known > 0 && !this.states.has(known)) known--;
    let state = known === 0 ? this.initial() : this.states.get(known);
    for (let r = known; r < round; r++) {
      if (!roundDetail(view, r)) throw new StartUnavailable(r + 1, `round ${r} is not on chain`);
      const members = roundUpdates(view, r);
      const passed = members.filter((update) => update.outcome === PASSED);
      const encoded = await this.fetchAll(passed, members, r + 1);
      try {
        state = aggregateRound(state, encoded, this.spec);
      } catch (error) {
        if (!(error instanceof RoundError || error.name === "CodecError")) throw error;
        throw new StartUnavailable(r + 1, `round ${r}'s updates do not aggregate: ${error.message}`);
      }
      this.states.set(state.round, state);
    }
    return { ...state, hash: stateHash(state) };
  }

  async fetchAll(passed, members, round) {
    const encoded = [];
    const missing = [];
    for (const update of passed) {
      let bytes = null;
      try {
        bytes = await this.fetchUpdate(update.updateHash, update, members);
      } catch (error) {
        bytes = null;
      }
      if (!bytes || sha256Hex(bytes) !== update.updateHash) missing.push(update.updateHash);
      else encoded.push({ workerIndex: update.workerIndex, samplesProcessed: update.samplesProcessed, bytes });
    }
    if (missing.length) {
      throw new StartUnavailable(round, `${missing.length} passed update(s) of round ${round - 1} are served by no `
        + "member", missing);
    }
    return encoded;
  }

  /** Why the chain's recorded start of `state.round` is not `state` ('' when it is, or has none yet). */
  disagreement(state, view) {
    const detail = roundDetail(view, state.round);
    const agreed = detail ? detail.start_weights_hash : "";
    const ours = state.hash || stateHash(state);
    return agreed && agreed !== ours
      ? `round ${state.round}: the chain recorded start weights ${agreed}, derived here ${ours}` : "";
  }
}
