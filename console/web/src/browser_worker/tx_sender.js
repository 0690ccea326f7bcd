// Sending a worker's messages in one call, as wallet/sender.py's TxSender plans and sends them: the chain id
// from the node's status, the nonce from the signer's committed account, the chain's minimum fee for the
// transaction's size (or a fee given), signed, broadcast and waited for until a block holds it. A tab sends
// one transaction at a time (its protocol loop waits for each), so the committed nonce is the next one.
import { encodeTx, txHash, withMinimumFee } from "./tx.js";

/** Sign `messages` ([{typeUrl, value}]) with `key`, send them through `node` (a NodeClient) and wait for the
 * block: {hash, height, code, log, nonce, fee}. TxRejected with the chain's log when refused. */
export async function sendMessages(node, key, messages, { fee, memo = "", timeoutMs = 30_000 } = {}) {
  const [{ chainId }, account] = await Promise.all([node.status(), node.account(key.address)]);
  let plan = { chainId, nonce: account.nonce, fee: fee ?? 0n, memo, messages };
  if (fee === undefined) {
    plan = withMinimumFee(plan, await node.feeParams());
  }
  const bytes = await encodeTx(plan, key);
  const included = await node.broadcast(bytes, { timeoutMs });
  return { ...included, hash: await txHash(bytes), nonce: plan.nonce, fee: plan.fee };
}
