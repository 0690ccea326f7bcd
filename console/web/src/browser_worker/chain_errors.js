// The errors of the browser worker's chain-facing modules (keys, key files, transactions, the node client):
// one tree under ChainClientError, each with a message a page can show as it is.

/** Base of every error the keys, key files, transaction encoders and node client raise on purpose. */
export class ChainClientError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}

/** A key file (a wallet armor, the page's stored key) that is not one, was edited, or is refused. */
export class KeyFileError extends ChainClientError {}

/** The password does not open this key file (or the file was altered: the two cannot be told apart). */
export class WrongPassword extends KeyFileError {}

/** A message field or transaction input that cannot be encoded as the chain reads it. */
export class EncodingError extends ChainClientError {}

/** Nothing (or something that is not a CometBFT JSON-RPC) answered at the node's URL. */
export class NodeUnreachable extends ChainClientError {
  constructor(url, reason = "") {
    super(`node unreachable at ${url}${reason ? `: ${reason}` : ""}`);
    this.url = url;
  }
}

/** The node answered with a JSON-RPC error object. */
export class RpcError extends ChainClientError {
  constructor(code, message, data = "") {
    super(`RPC error ${code}: ${message}${data ? ` (${data})` : ""}`);
    this.code = code;
    this.rpcMessage = message;
    this.data = data;
  }
}

/** An ABCI query answered with a non-zero code (e.g. a worker that is not registered: NotFound). */
export class QueryFailed extends ChainClientError {
  constructor(path, code, codespace, log) {
    super(`query ${path} failed with code ${code} (${codespace}): ${log}`);
    Object.assign(this, { path, code, codespace, log });
  }
}

/** CheckTx or the block refused the transaction; `log` is the chain's reason. */
export class TxRejected extends ChainClientError {
  constructor(code, codespace, log, hash = "", height = 0) {
    super(`transaction rejected${height ? ` in block ${height}` : ""} with code ${code} (${codespace}): ${log}`);
    Object.assign(this, { code, codespace, log, hash, height });
  }
}

/** A transaction CheckTx accepted was not seen in a block in time (it may still land). */
export class InclusionTimeout extends ChainClientError {
  constructor(hash, seconds) {
    super(`timeout: tx ${hash} not included in a block after ${seconds}s (it may still be)`);
    Object.assign(this, { hash, seconds });
  }
}
