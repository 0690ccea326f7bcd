// The browser worker's side of the shared test vectors (test_bw_chain_vectors.py): reads the cases Python
// made from stdin, answers what the JavaScript modules give for each on stdout, as JSON. Python compares.
import { keyFromSeed, sign } from "../../../console/web/src/browser_worker/keys.js";
import { fromHex, toHex } from "../../../console/web/src/browser_worker/bytes_text.js";
import * as tx from "../../../console/web/src/browser_worker/tx.js";

const ENCODERS = {
  MsgRegisterWorker: (fields) => tx.msgRegisterWorker(fields),
  MsgUpdateWorker: (fields) => tx.msgUpdateWorker(fields),
  MsgUnregisterWorker: () => tx.msgUnregisterWorker(),
  MsgJoinTask: (fields) => tx.msgJoinTask(fields.taskId ?? 0),
  MsgLeaveTask: (fields) => tx.msgLeaveTask(fields.taskId ?? 0),
  MsgCommitRound: (fields) => tx.msgCommitRound(fields),
  MsgReportBadKey: (fields) => tx.msgReportBadKey(fields),
};

const input = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => { text += chunk; }).on("end", () => resolve(text));
}));

const keys = [];
for (const { seed, message } of input.keys) {
  const key = await keyFromSeed(fromHex(seed));
  keys.push({ address: key.address, publicKey: toHex(key.publicKey),
    signature: toHex(await sign(key, fromHex(message))) });
}

const transactions = [];
for (const { seed, chainId, nonce, fee, memo, messages, feeParams } of input.transactions) {
  const key = await keyFromSeed(fromHex(seed));
  let plan = { chainId, nonce: typeof nonce === "string" ? BigInt(nonce) : nonce, fee, memo,
    messages: messages.map(({ kind, fields }) => ENCODERS[kind](fields)) };
  if (feeParams) {
    plan = tx.withMinimumFee(plan, feeParams);
  }
  const bytes = await tx.encodeTx(plan, key);
  transactions.push({ tx: toHex(bytes), hash: await tx.txHash(bytes), fee: String(plan.fee) });
}
process.stdout.write(JSON.stringify({ keys, transactions }));
