// Signing and sending the browser worker's transactions, one at a time: the chain id and the account's next
// nonce from the node, the chain's smallest fee for the transaction (`/params/auth`, as wallet/sender.py pays
// it), signed with the tab's key (tx.js) and broadcast until included (the node client waits for the block).
//
//   const sender = new TxSender(node, key);
//   const included = await sender.send(msgJoinTask(7));     // {height, code, log}; TxRejected with the log

import { encodeTx, withMinimumFee } from "./tx.js";

export class TxSender {
  constructor(node, key) {
    this.node = node;
    this.key = key;
    this.chainId = null;
    this.feeParams = null;
    this.queue = Promise.resolve();
  }

  /** Sign `messages` with the next nonce and the minimum fee and broadcast them; one transaction at a time,
   * so two never take the same nonce. */
  send(...messages) {
    const sent = this.queue.then(() => this.sendNow(messages));
    this.queue = sent.catch(() => {});
    return sent;
  }

  async sendNow(messages) {
    this.chainId ??= (await this.node.status()).chainId;
    if (this.feeParams === null) {
      const auth = (await this.node.query("/params/auth")) ?? {};
      this.feeParams = { minFee: BigInt(auth.min_fee ?? 0), feePerByte: BigInt(auth.fee_per_byte ?? 0) };
    }
    const { nonce } = await this.node.account(this.key.address);
    const plan = withMinimumFee({ chainId: this.chainId, nonce, messages }, this.feeParams);
    return this.node.broadcast(await encodeTx(plan, this.key));
  }
}
