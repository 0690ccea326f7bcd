// The browser worker's relay pusher driven from a test (test_relay_push_js.py): reads one JSON request on stdin,
// signs with libsodium (the seed as chain/crypto.py's PrivateKey takes it), answers JSON on stdout.
//   {op: "sign", seed, address, relay, taskId, round, resource, contentHash, timestamp} -> the push's headers
//   {op: "push", seed, address, relayUrl, reachAt?, taskId, round, blobs: {hash: base64}, checkpoints} -> {ok}
// `reachAt`: the URL the pushes really go to, when `relayUrl` names another relay (a push signed for it).

import { createRequire } from "node:module";
import { RelayPusher, signPush } from "../../../console/web/src/browser_worker/relay_push.js";

const require = createRequire(new URL("../../../console/web/package.json", import.meta.url));
const sodium = require("libsodium-wrappers-sumo");

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString());
await sodium.ready;
const pair = sodium.crypto_sign_seed_keypair(Uint8Array.from(Buffer.from(request.seed, "hex")));
const key = { publicKey: pair.publicKey, address: request.address, privateKey: pair.privateKey };
const sign = (signer, bytes) => sodium.crypto_sign_detached(bytes, signer.privateKey);

try {
  if (request.op === "sign") {
    const { relay, taskId, round, resource, contentHash, timestamp } = request;
    console.log(JSON.stringify(await signPush(key, sign, relay, taskId, round, resource, contentHash, timestamp)));
  } else {
    const fetch = request.reachAt
      ? (url, init) => globalThis.fetch(request.reachAt + url.slice(request.relayUrl.length), init)
      : globalThis.fetch;
    const pusher = new RelayPusher(request.relayUrl, key, sign, { fetch });
    const blobs = new Map(Object.entries(request.blobs).map(([h, data]) => [h, new Uint8Array(Buffer.from(data, "base64"))]));
    await pusher.pushRound(request.taskId, request.round, blobs, request.checkpoints);
    console.log(JSON.stringify({ ok: true }));
  }
} catch (error) {
  console.log(JSON.stringify({ error: `${error.name}: ${error.message}`, status: error.status }));
}
