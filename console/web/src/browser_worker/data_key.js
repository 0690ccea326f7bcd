// A private task's data key as delivered to this browser worker: its box read from the chain, opened, checked
// (compute/sealed_keys.py's `received_data_key`, the same steps).
//
//   const dataKey = await openDataKey(node, taskId, key);   // Uint8Array(32), or null while not delivered
//
// The requester seals the key to the worker's ed25519 account key (wallet/key_delivery.py): an X25519 sealed box
// to the key's Curve25519 form, which libsodium opens with the secret key converted the same way. What it holds
// must hash to the task's commitment, sha256("trolly/data-key/v1" || key) (chain/market/data_keys.py
// `data_key_hash`). `node` answers `query(path)` with the chain's JSON (bwchain's NodeClient; a test passes a
// fake): the box at /market/data_key/<task>/<address> (wallet/market_queries.py `find_data_key`), and, unless the
// caller passes `committedHash`, the task at /market/task/<task> for its `data_key_hash`. A box that is not there
// yet is answered "not found" (the chain's code 11): null, and the caller waits. A bad box raises BadDataKey
// with the box's bytes and whether the chain already took a report on it (`reported_height`); the worker
// reports it with box_proof.js's proof and stops working on the task.

import { sha256, toHex } from "../../../../compute/wasm/sha256.mjs";
import { BadDataKey, DataKeyError } from "./data_errors.js";
import { sodiumReady } from "./sodium.js";

const DATA_KEY_HASH_TAG = new TextEncoder().encode("trolly/data-key/v1");
const DATA_KEY_BYTES = 32;
/** A sealed data key: the 32-byte key, the sender's ephemeral X25519 public key (32) and a Poly1305 tag (16). */
const SEALED_KEY_BYTES = 80;
/** The chain's NotFound code (chain/errors.py): the box has not been delivered. */
const NOT_FOUND = 11;

/** The task's commitment to `dataKey` in hex: sha256(DATA_KEY_HASH_TAG || key). */
export function dataKeyHash(dataKey) {
  const tagged = new Uint8Array(DATA_KEY_HASH_TAG.length + dataKey.length);
  tagged.set(DATA_KEY_HASH_TAG);
  tagged.set(dataKey, DATA_KEY_HASH_TAG.length);
  return toHex(sha256(tagged));
}

/** The data key in `sealed`, opened with the ed25519 key whose 32-byte seed is `seed`; DataKeyError when it was
 * sealed to another key or is malformed (compute/data/encryption.py `open_data_key`). */
export async function openSealedKey(sealed, seed) {
  if (sealed.length !== SEALED_KEY_BYTES) {
    throw new DataKeyError(`a sealed data key is ${SEALED_KEY_BYTES} bytes, got ${sealed.length}`);
  }
  const sodium = await sodiumReady();
  const pair = sodium.crypto_sign_seed_keypair(seed);
  const secret = sodium.crypto_sign_ed25519_sk_to_curve25519(pair.privateKey);
  const pub = sodium.crypto_sign_ed25519_pk_to_curve25519(pair.publicKey);
  let dataKey;
  try {
    dataKey = sodium.crypto_box_seal_open(sealed, pub, secret);
  } catch {
    throw new DataKeyError("the sealed data key does not open with this key: it was sealed to another member");
  }
  if (dataKey.length !== DATA_KEY_BYTES) throw new DataKeyError(`a data key is ${DATA_KEY_BYTES} bytes`);
  return dataKey;
}

function fromHex(hex) {
  if (typeof hex !== "string" || !/^([0-9a-f]{2})*$/.test(hex)) throw new DataKeyError("the box is not hex bytes");
  return Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

/** The chain's answer at `path`, null when it has nothing there (NotFound). */
async function queryOrNull(node, path) {
  try {
    return await node.query(path);
  } catch (error) {
    if (error?.code === NOT_FOUND) return null;
    throw error;
  }
}

/** Task `taskId`'s data key as delivered to `key` ({seed, address}, bwchain's keys.js), null until it is;
 * BadDataKey when the box does not open with the key or holds another key than the task committed to. */
export async function openDataKey(node, taskId, key, { committedHash } = {}) {
  const box = await queryOrNull(node, `/market/data_key/${taskId}/${key.address}`);
  if (box === null) return null;
  const sealed = fromHex(box.sealed_key);
  const reported = Boolean(box.reported_height);
  let dataKey;
  try {
    dataKey = await openSealedKey(sealed, key.seed);
  } catch (error) {
    if (error instanceof DataKeyError) throw new BadDataKey(`task ${taskId}: ${error.message}`, sealed, reported);
    throw error;
  }
  const expected = committedHash ?? (await node.query(`/market/task/${taskId}`)).data_key_hash;
  if (dataKeyHash(dataKey) !== expected) {
    throw new BadDataKey(`task ${taskId}: the box holds another key than the one the task committed to`, sealed,
      reported);
  }
  return dataKey;
}
