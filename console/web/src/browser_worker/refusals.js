// What a person reads when the tab stops on bad input from outside: a relay that refuses its pushes, a private
// task's data that does not open (a bad key box: reported on chain first, as a native member reports it). Each
// message says what happened, what was signed (nothing more, or the report the protocol asks for), what to do;
// the protocol loop (protocol.js) throws it as a WorkerRefused and the page shows it as its message.

import { BlobRejected, BlobUnavailable } from "./relay_push.js";
import { BadDataKey, DataKeyError, DatasetError } from "./data_errors.js";

const RELAY_ADVICE = {
  401: "the relay did not accept the push's signature: check this computer's clock, then reload the page",
  403: "the relay does not see this worker as a member of a live task yet (its node may lag a block): reload " +
    "the page to try again",
  413: "the relay takes no blob this large: open the page with a relay that does (?relay=URL) and register again",
  421: "the relay does not know itself by the address this page was given: open the page with the relay's own " +
    "address (?relay=URL, as its operator publishes it) and register again to move this worker to it",
  507: "the relay is full: open the page with another relay (?relay=URL) and register again to move this " +
    "worker to it",
};

/** The words for a push the relay refused or never took, in round `round`; null for any other error. */
export function relayRefusal(error, round, relayUrl) {
  let what;
  let advice;
  if (error instanceof BlobRejected) {
    what = `the relay ${relayUrl} refused it (HTTP ${error.status})`;
    advice = RELAY_ADVICE[error.status] ?? "open the page with another relay (?relay=URL) and register again";
  } else if (error instanceof BlobUnavailable) {
    what = `the relay ${relayUrl} could not be reached`;
    advice = "check that the relay is running and that the page's relay address is right, then reload the page";
  } else {
    return null;
  }
  return `Round ${round} was not committed: its checkpoints could not be published, since ${what}. Nothing was ` +
    `signed for the round; the chain counts it as a missed round (a penalty, never a slash). What to do: ` +
    `${advice}. The relay said: ${error.message}`;
}

/** The words for a private task's data that does not open in this tab; null for any other error. `report`, for
 * a bad box: how its report went ({height, compensation}: the chain took it now; {earlier: true}: before; {refused:
 * the chain's log}). */
export function dataRefusal(error, taskId, report = null) {
  if (error instanceof BadDataKey) {
    return `Task ${taskId} cannot be trained here: the data key the requester delivered to this worker does not ` +
      `open the task's data (${error.message}). ${reportWords(report)}`;
  }
  if (error instanceof DatasetError) { // DataKeyError among them: a shard that fails secretbox
    const what = error instanceof DataKeyError ? "does not decrypt with the delivered key" : "does not check";
    return `Task ${taskId} cannot be trained here: its data ${what} (${error.message}). ` +
      `Nothing more is signed for this task. What to do: tell the requester, whose data or key is wrong; this ` +
      `worker's missed rounds are a penalty, never a slash.`;
  }
  return null;
}

function reportWords(report) {
  if (report?.height) {
    return `This worker reported it on chain in block ${report.height}, with a proof that lets the chain open the ` +
      `box without this worker's secret key: the chain released it from the task with its collateral and ` +
      `${report.compensation} utrl of compensation from the requester. Nothing more is signed for this task. What ` +
      `to do: nothing; this worker may join another task.`;
  }
  if (report?.earlier) {
    return "The chain took this worker's report on it before and released it from the task. Nothing more is " +
      "signed for this task. What to do: nothing; this worker may join another task.";
  }
  const refusedWords = report?.refused ? `The chain refused this worker's report on it (${report.refused}). ` : "";
  return `${refusedWords}Nothing more is signed for this task. What to do: tell the requester, who must deliver ` +
    `the key the task committed to; the chain counts a key it never delivered against them, and this worker's ` +
    `missed rounds are a penalty, never a slash.`;
}
