// A worker registered from JavaScript on a real node, for test_bw_node_client.py: reads {url, seed, stake,
// relay, closedUrl} on stdin, signs MsgRegisterWorker with the browser worker's modules, sends it through the
// node client and waits for its block; then sends it again (the chain must refuse it) and asks a port where
// nothing listens. Answers what each step gave, as JSON.
import { fromHex } from "../../../console/web/src/browser_worker/bytes_text.js";
import { keyFromSeed } from "../../../console/web/src/browser_worker/keys.js";
import { NodeClient } from "../../../console/web/src/browser_worker/node_client.js";
import { msgRegisterWorker } from "../../../console/web/src/browser_worker/tx.js";
import { sendMessages } from "../../../console/web/src/browser_worker/tx_sender.js";

const input = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => { text += chunk; }).on("end", () => resolve(text));
}));

async function refusal(action) {
  try {
    await action();
    return null;
  } catch (error) {
    return { error: error.name, message: error.message, code: error.code ?? null, log: error.log ?? null };
  }
}

const key = await keyFromSeed(fromHex(input.seed));
const node = new NodeClient(input.url.replace("http://", "tcp://"));
const register = msgRegisterWorker({ stake: BigInt(input.stake), relay: input.relay,
  hardware: { device: "wasm32", samplesPerSecond: 250, memoryMb: 512, threads: 1 } });
const status = await node.status();
const before = await node.account(key.address);
const sent = await sendMessages(node, key, [register]);
const after = await node.account(key.address);
const worker = await node.query(`/market/worker/${key.address}`);
const again = await refusal(() => sendMessages(node, key, [register]));
const missing = await refusal(() => node.query("/market/task/999999"));
const unreachable = await refusal(() => new NodeClient(input.closedUrl, { timeoutMs: 3000 }).status());

const text = (value) => (typeof value === "bigint" ? String(value) : value);
process.stdout.write(JSON.stringify({
  chainId: status.chainId, height: status.height, address: key.address,
  before: { balance: String(before.balance), nonce: String(before.nonce), pubKey: before.pubKey },
  sent: Object.fromEntries(Object.entries(sent).map(([name, value]) => [name, text(value)])),
  after: { balance: String(after.balance), nonce: String(after.nonce), hasPubKey: after.pubKey !== null },
  worker, again, missing, unreachable,
}));
