// The messages a worker sends to the chain (chain/proto/market.proto), each as {typeUrl, value}: the type URL
// the chain dispatches on and the message's canonical bytes, ready for `encodeTx` (tx.js). Fields are given
// in camelCase (`blobUrl`, `samplesPerSecond`) and written under the .proto's names; a field left out is
// unset (its default), a name the .proto does not have is refused, and what a field may hold is checked by
// proto_codec.js. The same messages compute/worker/market.py and compute/sealed_keys.py send.
import { EncodingError } from "./chain_errors.js";
import { encodeMessage, typeUrlOf } from "./proto_codec.js";

const MARKET = "trolly.market.v1.";

/** `{typeUrl, value}` of market message `name` with camelCase `fields`. */
export function marketMessage(name, fields = {}) {
  return { typeUrl: typeUrlOf(MARKET + name), value: encodeMessage(MARKET + name, snakeCase(fields)) };
}

/** Become a worker: {stake, hardware: {device, samplesPerSecond, memoryMb, threads}, blobUrl, relay}. */
export function msgRegisterWorker(fields) {
  return marketMessage("MsgRegisterWorker", fields);
}

/** Change a worker: {addStake, hardware (replaces when given), blobUrl, relay, clearRelay}. */
export function msgUpdateWorker(fields) {
  return marketMessage("MsgUpdateWorker", fields);
}

/** Stop being a worker (no open or running task): the stake unbonds. */
export function msgUnregisterWorker() {
  return marketMessage("MsgUnregisterWorker");
}

/** Join open task `taskId`, locking its collateral. */
export function msgJoinTask(taskId) {
  return marketMessage("MsgJoinTask", { taskId: required(taskId, "taskId") });
}

/** Leave task `taskId` (docs/protocol.md 4.1c). */
export function msgLeaveTask(taskId) {
  return marketMessage("MsgLeaveTask", { taskId: required(taskId, "taskId") });
}

/** A round's commitment: {taskId, round, updateHash, samplesProcessed, steps, checkpointRoot, numCheckpoints,
 * startWeightsHash, determinismProfile, residualHash}; hashes as 32 bytes or hex. The final report (round ==
 * rounds) gives only taskId, round and startWeightsHash. */
export function msgCommitRound(fields) {
  return marketMessage("MsgCommitRound", { ...fields, taskId: required(fields.taskId, "taskId") });
}

/** Report a data-key box that does not open or holds another key: {taskId, proof} (the proof's bytes as
 * compute/sealed_keys.py's bad_key_report makes them). */
export function msgReportBadKey(fields) {
  return marketMessage("MsgReportBadKey", { ...fields, taskId: required(fields.taskId, "taskId") });
}

function required(value, name) {
  if (value === undefined || value === null) {
    throw new EncodingError(`${name} is required`);
  }
  return value;
}

function snakeCase(fields) {
  if (fields === null || typeof fields !== "object" || fields instanceof Uint8Array || Array.isArray(fields)) {
    return fields;
  }
  return Object.fromEntries(Object.entries(fields).map(
    ([name, value]) => [name.replace(/[A-Z]/g, (letter) => "_" + letter.toLowerCase()), snakeCase(value)]));
}
