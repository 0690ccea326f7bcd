// A tab's round as it presents it: trained from W_r, then made into what it publishes on its relay and commits,
// as compute/cheats/registry.py's `CheatedRound.publish` and the native worker make them. The protocol loop
// (protocol.js) calls it for every round; the tests call it in Node.js with the same arguments.
//
//   const presented = await presentRound({ plan, spec, task, train, start, workerIndex, round, residual,
//                                          previous, log });
//   presented.listing      checkpoint hashes in order (the commitment's root is over them)
//   presented.blobs        Map hash -> bytes to push: the checkpoints served, the update, the residual
//   presented.withheld     checkpoint hashes listed but never served (a test's cheat only)
//   presented.commit       the fields of MsgCommitRound this round names (tx.js msgCommitRound, less taskId/round)
//   presented.residualTensors, presented.played   the next round's residual; this round, for a replay of it
//
// `train(round)` trains {startWeights (flat), workerIndex, roundIndex, steps} and resolves to {checkpoints
// [{hash, bytes}], endWeights (flat)}. `plan` (cheats.js) is the honest one unless the page is a test's: its
// `round` part says which lies the round tells around its training.

import { PROFILE_ID } from "../../../../compute/wasm/kernel.mjs";
import { sha256Hex, weightsHash } from "./canonical_encode.js";
import { checkpointRoot } from "./merkle.js";
import { encodeUpdate } from "./update.js";
import { flatWeights, namedWeights } from "./weights_layout.js";

/** The round trained (or, under a test's cheat, replayed from `previous`) and made publishable (module comment).
 * `start`: {weights: Map name -> tensor, hash}, W_r as the follower derived it. */
export async function presentRound({ plan, spec, task, train, start, workerIndex, round, residual = null,
  previous = null, log = () => {} }) {
  const lies = plan.round;
  let played = previous;
  if (!lies.replaysPrevious || previous === null) {
    if (lies.replaysPrevious) log(`round ${round}: no earlier round to replay, trained honestly`);
    const weights = lies.startWeights(start.weights, task.training.lr, workerIndex, round);
    const steps = task.innerSteps;
    const trained = await train({ startWeights: flatWeights(weights, task.sizes),
      workerIndex: lies.workerIndex(workerIndex), roundIndex: round, steps });
    played = { checkpoints: trained.checkpoints, endWeights: trained.endWeights, startWeights: weights, steps,
      startHash: weights === start.weights ? start.hash : weightsHash(weights) };
  }
  const published = publish(spec, task, played, lies, residual);
  const commit = {
    updateHash: published.updateHash, samplesProcessed: lies.samples(played.steps * task.batchSize),
    steps: played.steps, checkpointRoot: checkpointRoot(published.listing), numCheckpoints: published.listing.length,
    startWeightsHash: played === previous ? start.hash : played.startHash, // a replay claims this round's start
    determinismProfile: PROFILE_ID, residualHash: published.residualHash,
  };
  return { ...published, commit, played };
}

/** The listing, the blobs to push (what is served) and the update and residual, as `CheatedRound.publish`. */
function publish(spec, task, played, lies, residual) {
  const listing = [];
  const blobs = new Map();
  const withheld = [];
  played.checkpoints.forEach((checkpoint, index) => {
    const bytes = lies.forgeCheckpoint ? lies.forgeCheckpoint(index, checkpoint.bytes) : checkpoint.bytes;
    const digest = lies.forgeCheckpoint ? sha256Hex(bytes) : checkpoint.hash;
    listing.push(digest);
    if (lies.withholds && index > 0) withheld.push(digest);
    else blobs.set(digest, bytes);
  });
  const update = encodeUpdate(spec, played.startWeights, namedWeights(played.endWeights, task.sizes), residual);
  const updateBytes = lies.forgeUpdate ? lies.forgeUpdate(update.update) : update.update;
  const updateHash = sha256Hex(updateBytes);
  blobs.set(updateHash, updateBytes);
  blobs.set(update.residualHash, update.residual);
  return { listing, blobs, withheld, updateHash, residualHash: update.residualHash,
    residualTensors: update.residualTensors };
}
