// The market as the browser worker reads it, through the node client's ABCI queries: the same paths and the
// same JSON as wallet/market_queries.py reads (its views: wallet/market_views.py), so a tab and a native worker
// see one task alike.
//
//   const reads = new MarketReads(node);             // node: NodeClient (node_client.js)
//   await reads.task(7)                              // the overview with `round_details` (every round, whole)
//   await reads.liveTasks()                          // open and running tasks, ascending by id
//   await reads.worker(address)                      // the record, or null when not registered

import { QueryFailed } from "./chain_errors.js";

const NOT_FOUND = 11; // chain/errors.py NotFound.code
const MAX_PAGES = 10_000;

/** The member of `view` at `address` (undefined when none). */
export function memberOf(view, address) {
  return view.members.find((member) => member.worker === address);
}

/** Round `index` of a whole task view (undefined when not shown). */
export function roundOf(view, index) {
  return view.round_details.find((detail) => detail.round === index);
}

export class MarketReads {
  constructor(node) {
    this.node = node;
  }

  async params() {
    return this.node.query("/market/params");
  }

  /** The worker's record (its fields beside `registered`), or null when it is not registered. */
  async worker(address) {
    try {
      const view = await this.node.query(`/market/worker/${address}`);
      return view.registered ? view : null;
    } catch (error) {
      if (error instanceof QueryFailed && error.code === NOT_FOUND) return null;
      throw error;
    }
  }

  async liveTasks() {
    const tasks = [];
    let after = 0;
    for (let page = 0; page < MAX_PAGES; page++) {
      const answer = await this.node.query(after ? `/market/tasks/open/after/${after}` : "/market/tasks/open");
      tasks.push(...answer.tasks);
      if (answer.next === null || answer.next === undefined || answer.next <= after) break;
      after = answer.next;
    }
    return tasks;
  }

  /** The spec's text exactly as submitted, checked against the hash the chain recorded. */
  async specText(taskId) {
    const answer = await this.node.query(`/market/spec/${taskId}`);
    return answer.spec;
  }

  /** The whole task: its overview, then every round it shows with all their commitments. */
  async task(taskId) {
    const overview = await this.node.query(`/market/task/${taskId}`);
    const rounds = [];
    for (let index = 0; index < overview.recorded_rounds; index++) rounds.push(await this.round(taskId, index));
    return { ...overview, round_details: rounds };
  }

  async round(taskId, index) {
    const base = `/market/task/${taskId}/round/${index}`;
    const commitments = [];
    let after = null;
    let page = null;
    for (let count = 0; count < MAX_PAGES; count++) {
      page = await this.node.query(after === null ? base : `${base}/after/${after}`);
      commitments.push(...page.commitments);
      if (page.next === null || page.next === undefined || (after !== null && page.next <= after)) break;
      after = page.next;
    }
    return { round: page.round, start_weights_hash: page.start_weights_hash, final_report: page.final_report,
      commitments };
  }
}
