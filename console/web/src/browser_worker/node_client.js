// A node's CometBFT JSON-RPC from a browser tab (or Node.js), as wallet/rpc.py speaks it, so it works the
// same against the solo engine of `trolly-node dev` and a real CometBFT node: POST of {jsonrpc, id, method,
// params}, 64-bit integers as strings, bytes as base64, hashes as upper-case hex. `fetch` is passed in (the
// page's, or Node's global), nothing else of the environment is used.
//
// Queries answer the chain's JSON (the paths of wallet/market_queries.py: `/market/tasks`, `/market/task/7`,
// `/market/worker/<address>`, `/market/data_key/<task>/<address>`, ... and `/account/<address>`), read with
// exact integers (exact_json.js). `broadcast` hands a transaction to the mempool (broadcast_tx_sync) and
// polls the `tx` method until the block holds it, as wallet/rpc.py's broadcast_and_wait. Proofs are not
// checked here: the tab trusts the node it was pointed at, as a worker trusts its own.
import { fromBase64, fromHex, toBase64, toHex } from "./bytes_text.js";
import {
  EncodingError, InclusionTimeout, NodeUnreachable, QueryFailed, RpcError, TxRejected,
} from "./chain_errors.js";
import { parseExactJson } from "./exact_json.js";

export const DEFAULT_NODE = "http://127.0.0.1:26657";

/** `tcp://host:port` and a bare `host:port` as http URLs, as wallet/rpc.py's normalize_node_url. */
export function normalizeNodeUrl(url) {
  let text = String(url || DEFAULT_NODE).trim().replace(/\/+$/, "");
  if (text.startsWith("tcp://")) {
    text = "http://" + text.slice("tcp://".length);
  }
  return text.includes("://") ? text : "http://" + text;
}

export class NodeClient {
  constructor(url, { fetch = globalThis.fetch, timeoutMs = 10_000 } = {}) {
    this.url = normalizeNodeUrl(url);
    // Called unbound: a browser's fetch throws "Illegal invocation" when called as a method of another object.
    this.fetch = (...args) => fetch(...args);
    this.timeoutMs = timeoutMs;
    this.nextId = 1;
    this.feeParamsRead = null;
  }

  /** One JSON-RPC call; its `result`. */
  async call(method, params = {}) {
    const request = { jsonrpc: "2.0", id: this.nextId++, method, params };
    const body = await this.post(JSON.stringify(request));
    let answer;
    try {
      answer = JSON.parse(body.text);
    } catch {
      throw new RpcError(-32700, `HTTP ${body.status}: the answer is not JSON (is ${this.url} a CometBFT RPC?)`);
    }
    if (answer === null || typeof answer !== "object") {
      throw new RpcError(-32700, "the answer is not a JSON-RPC object");
    }
    if (answer.error) {
      const { code = -1, message = "", data = "" } = answer.error;
      throw new RpcError(Number(code), String(message), String(data ?? ""));
    }
    if (!("result" in answer)) {
      throw new RpcError(-32603, `HTTP ${body.status}: JSON-RPC answer without result`);
    }
    return answer.result;
  }

  async post(text) {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.timeoutMs);
    try {
      const response = await this.fetch(this.url, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: text, signal: abort.signal,
      });
      return { status: response.status, text: await response.text() };
    } catch (error) {
      const reason = abort.signal.aborted ? `no answer within ${this.timeoutMs / 1000}s`
        : (error?.cause?.code ?? error?.message ?? String(error));
      throw new NodeUnreachable(this.url, reason);
    } finally {
      clearTimeout(timer);
    }
  }

  /** {chainId, height, catchingUp, raw}: what the node says of itself and the chain. */
  async status() {
    const raw = await this.call("status");
    return {
      chainId: raw?.node_info?.network ?? "",
      height: Number(raw?.sync_info?.latest_block_height ?? 0),
      catchingUp: Boolean(raw?.sync_info?.catching_up),
      raw,
    };
  }

  /** The ABCI query's answer: {code, codespace, log, value: Uint8Array, height}. */
  async abciQuery(path, data = new Uint8Array()) {
    const raw = await this.call("abci_query", { path, data: toHex(data), prove: false });
    const response = raw?.response ?? {};
    return {
      code: Number(response.code ?? 0),
      codespace: response.codespace ?? "",
      log: response.log ?? "",
      value: fromBase64(response.value ?? "") ?? new Uint8Array(),
      height: Number(response.height ?? 0),
    };
  }

  /** The JSON answer at a query path (null when empty); QueryFailed with the chain's log on a non-zero code. */
  async query(path) {
    const result = await this.abciQuery(path);
    if (result.code !== 0) {
      throw new QueryFailed(path, result.code, result.codespace, result.log);
    }
    if (!result.value.length) {
      return null;
    }
    try {
      return parseExactJson(new TextDecoder().decode(result.value));
    } catch {
      throw new RpcError(-32700, `the answer to query ${path} is not JSON (is ${this.url} a Trolly node?)`);
    }
  }

  /** {address, balance, nonce, pubKey}: the account's committed record (balance and nonce as BigInt, pubKey
   * null until the chain has seen the key), as wallet/sender.py's fetch_account. */
  async account(address) {
    const value = await this.query(`/account/${address}`);
    return {
      address: value.address,
      balance: BigInt(value.balance),
      nonce: BigInt(value.nonce),
      pubKey: value.pub_key == null ? null : fromBase64(value.pub_key),
    };
  }

  /** {minFee, feePerByte} of the chain's auth params (read once: they change only at genesis). */
  async feeParams() {
    this.feeParamsRead ??= this.query("/params/auth").then((auth) => ({
      minFee: BigInt(auth?.min_fee ?? 0), feePerByte: BigInt(auth?.fee_per_byte ?? 0),
    }));
    return this.feeParamsRead;
  }

  /** CheckTx's verdict {hash, code, codespace, log}; TxRejected when it refuses the transaction. */
  async broadcastSync(txBytes) {
    const raw = await this.call("broadcast_tx_sync", { tx: toBase64(txBytes) });
    const result = {
      hash: String(raw?.hash ?? "").toUpperCase(),
      code: Number(raw?.code ?? 0),
      codespace: raw?.codespace ?? "",
      log: raw?.log ?? "",
    };
    if (result.code !== 0) {
      throw new TxRejected(result.code, result.codespace, result.log, result.hash);
    }
    return result;
  }

  /** The included transaction {hash, height, code, codespace, log} with this hex hash, null while not in a block. */
  async findTx(hash) {
    const hashBytes = fromHex(hash);
    if (hashBytes === null || hashBytes.length !== 32) {
      throw new EncodingError(`a transaction hash is 64 hex digits, got ${JSON.stringify(hash)}`);
    }
    let raw;
    try {
      raw = await this.call("tx", { hash: toBase64(hashBytes), prove: false });
    } catch (error) {
      if (error instanceof RpcError && `${error.rpcMessage} ${error.data}`.toLowerCase().includes("not found")) {
        return null;
      }
      throw error;
    }
    const result = raw?.tx_result ?? {};
    return {
      hash: String(raw?.hash ?? hash).toUpperCase(),
      height: Number(raw?.height ?? 0),
      code: Number(result.code ?? 0),
      codespace: result.codespace ?? "",
      log: result.log ?? "",
    };
  }

  /** Broadcast `txBytes` and wait until a block holds it: {hash, height, code, log}. TxRejected when CheckTx
   * or the block refuses it (in a block, the fee was charged); InclusionTimeout after `timeoutMs`. */
  async broadcast(txBytes, { timeoutMs = 30_000, pollMs = 200 } = {}) {
    const { hash } = await this.broadcastSync(txBytes);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const included = await this.findTx(hash);
      if (included !== null) {
        if (included.code !== 0) {
          throw new TxRejected(included.code, included.codespace, included.log, hash, included.height);
        }
        return included;
      }
      if (Date.now() >= deadline) {
        throw new InclusionTimeout(hash, timeoutMs / 1000);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(pollMs, Math.max(0, deadline - Date.now()))));
    }
  }
}
