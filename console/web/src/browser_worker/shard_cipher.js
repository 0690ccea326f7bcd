// A private dataset's shard opened with its data key: compute/data/encryption.py stores each shard as PyNaCl's
// `SecretBox.encrypt`, the 24-byte nonce then libsodium's crypto_secretbox_easy ciphertext (tag first), so the
// same libsodium call opens it here. The shard's hash was checked before: a shard that does not open was sealed
// under another key (another task's), or changed before it was hashed.

import { DataKeyError } from "./data_errors.js";

const NONCE_BYTES = 24;
const TAG_BYTES = 16;

/** The plain bytes of an encrypted shard; DataKeyError when `key` is not its key or a byte changed. */
export function decryptShard(sodium, key, data) {
  if (data.length < NONCE_BYTES + TAG_BYTES) {
    throw new DataKeyError("the shard does not open with this data key (it is shorter than a sealed shard)");
  }
  try {
    return sodium.crypto_secretbox_open_easy(data.subarray(NONCE_BYTES), data.subarray(0, NONCE_BYTES), key);
  } catch {
    throw new DataKeyError("the shard does not open with this data key (another task's key, or changed bytes)");
  }
}
