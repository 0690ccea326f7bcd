// The worker's side of a blob relay (compute/blobs/relay_push.py): a tab cannot serve its blobs, so it pushes
// its round's checkpoints, update and residual, then the round's checkpoint listing, to the relay it registered,
// each push signed the way compute/blobs/relay_auth.py's `sign_push` signs it (`trolly-relay-push/v2`):
//
//   trolly-relay-push/v2 \n relay \n worker \n task \n round \n resource \n sha256 \n unix seconds
//
// `relay` in its one compared form (`relayIdentity`), `resource` "blob" or "checkpoints" (the listing). A
// signature is good for that content at that relay in that round of that task by that worker, and nothing else.
//
//   const pusher = new RelayPusher("https://relay.example", key, sign, { fetch });   // sign(key, bytes) -> 64 bytes
//   await pusher.pushRound(taskId, round, blobs /* Map hash -> bytes */, checkpointHashes);
//
// `key` is {publicKey: Uint8Array(32), address: "trolly1..."} (bwchain's keys.js); `sign(key, bytes)` its
// ed25519 signature. Connection failures and 5xx are retried with backoff and end in `BlobUnavailable`; a
// refusal raises `BlobRejected` (or `BlobTooLarge`) with the relay's reason, at once.

import { sha256Hex } from "./canonical_encode.js";
import { utf8 } from "./bytes.js";

export const PUSH_DOMAIN = "trolly-relay-push/v2";
const DEFAULT_PORTS = { http: "80", https: "443" };
const RETRY = { attempts: 4, initialDelay: 0.2, maxDelay: 5.0 }; // compute/blobs/client.py's RetryPolicy

/** The relay refused a push (HTTP 4xx); the message carries its reason. */
export class BlobRejected extends Error {
  constructor(message, status) {
    super(message);
    this.name = "BlobRejected";
    this.status = status;
  }
}

/** The relay refused a push as too large (HTTP 413). */
export class BlobTooLarge extends BlobRejected {
  constructor(message, status) {
    super(message, status);
    this.name = "BlobTooLarge";
  }
}

/** The relay could not be reached (or answered 5xx) in every attempt. */
export class BlobUnavailable extends Error {
  constructor(message) {
    super(message);
    this.name = "BlobUnavailable";
  }
}

/** `url` (a relay URL as the chain accepts it) in the one form pushes sign: scheme and host in lower case,
 * without the scheme's default port or a trailing slash (relay_auth.py's `relay_identity`). */
export function relayIdentity(url) {
  const match = /^(https?):\/\/([^/]*)(\/.*)?$/.exec(url);
  if (!match || /[^!-~]|[\\?#@]/.test(url) || !match[2]) {
    throw new Error(`${JSON.stringify(url).slice(0, 100)} is not a relay URL (http[s]://host[:port][/path])`);
  }
  const [, scheme, authority, rawPath = ""] = match;
  let [host, port] = [authority, ""];
  if (authority.lastIndexOf(":") > authority.lastIndexOf("]")) {
    host = authority.slice(0, authority.lastIndexOf(":"));
    port = authority.slice(authority.lastIndexOf(":") + 1);
  }
  if (port === DEFAULT_PORTS[scheme]) port = "";
  const path = rawPath.slice(1).replace(/\/+$/, "");
  return `${scheme}://${host.toLowerCase()}${port ? `:${port}` : ""}${path ? `/${path}` : ""}`;
}

/** The bytes a push's signature covers. */
export function pushMessage(relay, worker, taskId, round, resource, contentHash, timestamp) {
  return utf8([PUSH_DOMAIN, relay, worker, String(taskId), String(round), resource, contentHash,
    String(timestamp)].join("\n"));
}

function hex(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** The headers of a push (relay_auth.py's `sign_push`): `sign(key, bytes)` signs the message. */
export async function signPush(key, sign, relay, taskId, round, resource, contentHash, timestamp) {
  const identity = relayIdentity(relay);
  const signature = await sign(key, pushMessage(identity, key.address, taskId, round, resource, contentHash,
    timestamp));
  return { "Trolly-Relay": identity, "Trolly-Task": String(taskId), "Trolly-Round": String(round),
    "Trolly-Public-Key": hex(key.publicKey), "Trolly-Time": String(timestamp), "Trolly-Signature": hex(signature) };
}

/** The listing body of a round's checkpoints, byte for byte Python's `json.dumps({"checkpoint_hashes": [...]})`. */
export function listingBody(checkpointHashes) {
  return utf8(`{"checkpoint_hashes": [${checkpointHashes.map((h) => `"${h}"`).join(", ")}]}`);
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

export class RelayPusher {
  /** `options.fetch`: the fetch to use (the global one by default); `options.now()`: Unix seconds. */
  constructor(relayUrl, key, sign, { fetch = globalThis.fetch, now = () => Date.now() / 1000, retry = RETRY } = {}) {
    this.relayUrl = relayUrl.replace(/\/+$/, "");
    this.relay = relayIdentity(relayUrl);
    this.key = key;
    this.sign = sign;
    this.fetch = fetch;
    this.now = now;
    this.retry = retry;
  }

  /** PUT `body` to the relay, signed afresh for each attempt; returns the status (200: it had it, 201: stored). */
  async put(path, body, taskId, round, resource, contentHash) {
    const url = `${this.relayUrl}/workers/${this.key.address}${path}`;
    let last = "";
    for (let attempt = 0; attempt < this.retry.attempts; attempt++) {
      if (attempt) await sleep(Math.min(this.retry.initialDelay * 2 ** (attempt - 1), this.retry.maxDelay));
      const headers = await signPush(this.key, this.sign, this.relay, taskId, round, resource, contentHash,
        Math.floor(this.now()));
      let response;
      try {
        response = await this.fetch(url, { method: "PUT", body, headers, redirect: "manual" });
      } catch (error) {
        last = `${error.name}: ${error.message}`;
        continue;
      }
      const text = await response.text();
      if (response.status === 200 || response.status === 201) return response.status;
      if (response.status < 500) {
        const Kind = response.status === 413 ? BlobTooLarge : BlobRejected;
        throw new Kind(`${url}: the relay refused the push: HTTP ${response.status}: ${text.slice(0, 500)}`,
          response.status);
      }
      last = `HTTP ${response.status}: ${text.slice(0, 200)}`;
    }
    throw new BlobUnavailable(`${url}: gave up after ${this.retry.attempts} attempts (${last})`);
  }

  /** Push each blob of `blobs` (a Map hash -> bytes, in its order) for round `round` of `taskId`. */
  async pushBlobs(taskId, round, blobs) {
    for (const [digest, bytes] of blobs) {
      if (sha256Hex(bytes) !== digest) throw new Error(`the blob named ${digest} does not hash to its name`);
      await this.put(`/blobs/${digest}`, bytes, taskId, round, "blob", digest);
    }
  }

  /** Push a round's checkpoints (in order) and every other blob of `blobs` (its update, its residual), then its
   * checkpoint listing. `withheld`: listed checkpoints left out on purpose (a test's cheat only, cheats.js). */
  async pushRound(taskId, round, blobs, checkpointHashes, withheld = []) {
    const missing = checkpointHashes.filter((digest) => !blobs.has(digest) && !withheld.includes(digest));
    if (missing.length) throw new Error(`the round's blobs lack checkpoint ${missing[0]}`);
    const ordered = new Map(checkpointHashes.filter((digest) => blobs.has(digest))
      .map((digest) => [digest, blobs.get(digest)]));
    for (const [digest, bytes] of blobs) if (!ordered.has(digest)) ordered.set(digest, bytes);
    await this.pushBlobs(taskId, round, ordered);
    const body = listingBody(checkpointHashes);
    await this.put(`/tasks/${taskId}/rounds/${round}/checkpoints`, body, taskId, round, "checkpoints",
      sha256Hex(body));
  }
}
