// The browser worker's data errors, one tree as in Python (compute/errors.py DatasetError, compute/data/
// encryption.py DataKeyError, compute/sealed_keys.py BadDataKey), so the page tells "the data is wrong" from
// "the key is not here yet" from "the requester sealed a bad key" by class, and shows the message as it is.

/** A dataset that cannot be fetched, does not match its hashes, or is not what the task declared. */
export class DatasetError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}

/** A private dataset's key is missing, malformed, or does not open its shards. */
export class DataKeyError extends DatasetError {}

/** The box delivered to this worker does not open with its key, or holds another key than the task committed
 * to: the requester's fault (the worker reports it on chain, unless `reported` says the chain already took its
 * report, and stops working on the task). */
export class BadDataKey extends DataKeyError {
  constructor(message, sealed, reported = false) {
    super(message);
    this.sealed = sealed;
    this.reported = reported;
  }
}
