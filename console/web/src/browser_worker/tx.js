// Signed transactions, byte for byte as wallet/txbuilder.py's TxPlan.sign and chain/tx.py's build_tx make
// them: the body `TxBody {chain_id, nonce, fee, messages: [Any {type_url, value}], memo}` encoded
// canonically, signed with ed25519 over SIGN_DOMAIN || body bytes, and wrapped as `Tx {body_bytes, pubkey,
// signature}`. The chain verifies the signature over the body bytes exactly as sent, and refuses any
// encoding that is not the canonical one, so these bytes must be Python's (the shared test vectors in
// tests/console/browser_worker/ hold them to it). A transaction's hash is sha256 of its bytes, upper-case hex
// as CometBFT shows it.
import { toHex } from "./bytes_text.js";
import { EncodingError } from "./chain_errors.js";
import { sign } from "./keys.js";
import { encodeMessage, exactInteger } from "./proto_codec.js";
import { sodiumReady } from "./sodium.js";

export {
  marketMessage, msgCommitRound, msgJoinTask, msgLeaveTask, msgRegisterWorker, msgReportBadKey,
  msgUnregisterWorker, msgUpdateWorker,
} from "./worker_messages.js";

/** chain/tx.py's SIGN_DOMAIN: "trolly/tx/v1" and a zero byte, before the body bytes in what is signed. */
export const SIGN_DOMAIN = new Uint8Array([...new TextEncoder().encode("trolly/tx/v1"), 0]);

const PUBKEY_LENGTH = 32;
const SIGNATURE_LENGTH = 64;

/** The canonical TxBody bytes of a plan {chainId, nonce, fee = 0, memo = "", messages: [{typeUrl, value}]}. */
export function encodeBody({ chainId, nonce, fee = 0, memo = "", messages }) {
  if (typeof chainId !== "string" || chainId === "") {
    throw new EncodingError("the chain id is required (the node's status gives it)");
  }
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new EncodingError("a transaction carries at least one message");
  }
  return encodeMessage("trolly.tx.v1.TxBody", {
    chain_id: chainId,
    nonce,
    fee,
    memo,
    messages: messages.map(({ typeUrl, value }) => ({ type_url: typeUrl, value })),
  });
}

/** The signed transaction bytes of `plan` by `key` (byte-identical to TxPlan(...).sign(key) in Python). */
export async function encodeTx(plan, key) {
  const bodyBytes = encodeBody(plan);
  const signature = await sign(key, signBytes(bodyBytes));
  return envelope(bodyBytes, key.publicKey, signature);
}

/** What is signed: SIGN_DOMAIN || body bytes. */
export function signBytes(bodyBytes) {
  const bytes = new Uint8Array(SIGN_DOMAIN.length + bodyBytes.length);
  bytes.set(SIGN_DOMAIN);
  bytes.set(bodyBytes, SIGN_DOMAIN.length);
  return bytes;
}

function envelope(bodyBytes, pubkey, signature) {
  return encodeMessage("trolly.tx.v1.Tx", { body_bytes: bodyBytes, pubkey, signature });
}

/** The signed size of `plan` in bytes, known before signing (a key and a signature have fixed lengths). */
export function encodedSize(plan) {
  return envelope(encodeBody(plan), new Uint8Array(PUBKEY_LENGTH).fill(1),
    new Uint8Array(SIGNATURE_LENGTH).fill(1)).length;
}

/** `plan` with the chain's smallest fee for it, `minFee + feePerByte x its size` (TxPlan.with_minimum_fee):
 * the fee is part of the body, so its own length counts; it is raised until it covers the size it gives. */
export function withMinimumFee(plan, { minFee, feePerByte }) {
  const base = exactInteger(minFee, "minFee");
  const perByte = exactInteger(feePerByte, "feePerByte");
  let fee = base;
  for (;;) {
    const needed = base + perByte * BigInt(encodedSize({ ...plan, fee }));
    if (needed <= fee) {
      return { ...plan, fee };
    }
    fee = needed;
  }
}

/** The transaction's hash: sha256 of its bytes, upper-case hex (CometBFT's form). */
export async function txHash(bytes) {
  const sodium = await sodiumReady();
  return toHex(sodium.crypto_hash_sha256(bytes)).toUpperCase();
}
