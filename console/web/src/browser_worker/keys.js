// A worker's account key in the browser: ed25519 from a 32-byte seed, as chain/crypto.py's PrivateKey, and
// its address, bech32("trolly", sha256(public key)[:20]), as chain/crypto.py's address_from_pubkey and
// encode_address. A key is a plain object {seed, publicKey, address}; the seed is the only secret, kept
// in memory and, encrypted under the tab's password, in storage (keystore.js). Every function here is async
// because libsodium's WebAssembly must be ready first (sodium.js).
import { bech32 } from "bech32";

import { KeyFileError } from "./chain_errors.js";
import { sodiumReady } from "./sodium.js";

export { sodiumReady };

export const ADDRESS_PREFIX = "trolly";
export const ADDRESS_LENGTH = 20;
export const SEED_LENGTH = 32;

/** The bech32 `trolly1...` address of a 32-byte ed25519 public key. */
export async function addressOf(publicKey) {
  const sodium = await sodiumReady();
  const digest = sodium.crypto_hash_sha256(publicKey);
  return bech32.encode(ADDRESS_PREFIX, bech32.toWords(digest.subarray(0, ADDRESS_LENGTH)));
}

/** The key of a 32-byte seed (the same key Python's PrivateKey(seed) is). */
export async function keyFromSeed(seed) {
  if (!(seed instanceof Uint8Array) || seed.length !== SEED_LENGTH) {
    throw new KeyFileError(`an ed25519 seed is ${SEED_LENGTH} bytes`);
  }
  const sodium = await sodiumReady();
  const { publicKey } = sodium.crypto_sign_seed_keypair(seed);
  return { seed: Uint8Array.from(seed), publicKey, address: await addressOf(publicKey) };
}

/** A new key from libsodium's random generator (the browser's crypto.getRandomValues). */
export async function generateKey() {
  const sodium = await sodiumReady();
  return keyFromSeed(sodium.randombytes_buf(SEED_LENGTH));
}

/** The 64-byte ed25519 signature of `bytes` by `key`. */
export async function sign(key, bytes) {
  const sodium = await sodiumReady();
  const { privateKey } = sodium.crypto_sign_seed_keypair(key.seed);
  try {
    return sodium.crypto_sign_detached(bytes, privateKey);
  } finally {
    sodium.memzero(privateKey);
  }
}

/** True when `signature` is `publicKey`'s valid ed25519 signature of `bytes`. */
export async function verify(publicKey, bytes, signature) {
  const sodium = await sodiumReady();
  try {
    return sodium.crypto_sign_verify_detached(signature, bytes, publicKey);
  } catch {
    return false; // a malformed key or signature is simply not a valid signature
  }
}
