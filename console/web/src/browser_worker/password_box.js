// A seed encrypted under a password: argon2id derives a 32-byte key from the password and a random salt,
// and libsodium's secretbox (XSalsa20-Poly1305) seals the seed under it, as the wallet's keyring and armors
// do (wallet/keyring.py, wallet/armor.py). Shared by the armor import (armor.js) and the page's stored key
// (keystore.js). The cost parameters a file names are bounded before any hashing, as wallet/keyring.py's
// check_kdf_params bounds them, so an edited file can neither make the tab allocate gigabytes nor name a cost
// too weak to protect the seed.
import { fromBase64 } from "./bytes_text.js";
import { KeyFileError, WrongPassword } from "./chain_errors.js";
import { sodiumReady } from "./sodium.js";

/** libsodium's levels (the same numbers as PyNaCl's argon2id constants). */
export const INTERACTIVE = { opslimit: 2, memlimit: 64 * 1024 * 1024 };
export const MODERATE = { opslimit: 3, memlimit: 256 * 1024 * 1024 };
export const SENSITIVE = { opslimit: 4, memlimit: 1024 * 1024 * 1024 };

/** The weakest and costliest parameters a key file may name: wallet/keyring.py's WEAKEST_ACCEPTED and
 * STRONGEST_ACCEPTED, so every armor `keys export` writes opens here and nothing else does. */
export const WEAKEST_ACCEPTED = INTERACTIVE;
export const STRONGEST_ACCEPTED = SENSITIVE;

export const SALT_BYTES = 16;

/** `params` when both costs are integers within the accepted range, else KeyFileError naming the bound. */
export function checkKdfParams(params, source) {
  for (const name of ["opslimit", "memlimit"]) {
    const value = params[name];
    if (typeof value !== "number" || !Number.isInteger(value)) {
      throw new KeyFileError(`${source}: argon2id ${name} must be an integer, got ${JSON.stringify(value)}`);
    }
    if (value > STRONGEST_ACCEPTED[name]) {
      throw new KeyFileError(`${source}: argon2id ${name} ${value} is more than the ${STRONGEST_ACCEPTED[name]} ` +
        "accepted (libsodium's SENSITIVE level); the file is damaged or was not written by Trolly");
    }
    if (value < WEAKEST_ACCEPTED[name]) {
      throw new KeyFileError(`${source}: argon2id ${name} ${value} is weaker than the ${WEAKEST_ACCEPTED[name]} ` +
        "accepted (libsodium's INTERACTIVE level); the file was not written by Trolly");
    }
  }
  return params;
}

async function deriveKey(password, salt, params) {
  if (typeof password !== "string" || password.length === 0) {
    throw new KeyFileError("a password is needed");
  }
  const sodium = await sodiumReady();
  if (salt.length !== sodium.crypto_pwhash_SALTBYTES) {
    throw new KeyFileError(`the argon2id salt must be ${sodium.crypto_pwhash_SALTBYTES} bytes, got ${salt.length}`);
  }
  try {
    return sodium.crypto_pwhash(sodium.crypto_secretbox_KEYBYTES, sodium.from_string(password), salt,
      params.opslimit, params.memlimit, sodium.crypto_pwhash_ALG_ARGON2ID13);
  } catch (error) {
    throw new KeyFileError(`argon2id could not run at ${params.memlimit} bytes of memory here: ${error.message}`);
  }
}

/** {salt, box}: `seed` sealed under `password` at `params`, the box in PyNaCl's layout (nonce || ciphertext). */
export async function sealSeed(seed, password, params) {
  const sodium = await sodiumReady();
  const salt = sodium.randombytes_buf(SALT_BYTES);
  const key = await deriveKey(password, salt, params);
  const nonce = sodium.randombytes_buf(sodium.crypto_secretbox_NONCEBYTES);
  const box = new Uint8Array([...nonce, ...sodium.crypto_secretbox_easy(seed, nonce, key)]);
  sodium.memzero(key);
  return { salt, box };
}

/** The seed inside `box`; WrongPassword when it does not open (wrong password, or the box was altered). */
export async function openSeed(box, password, salt, params, wrongPasswordMessage) {
  const sodium = await sodiumReady();
  const nonceBytes = sodium.crypto_secretbox_NONCEBYTES;
  if (box.length < nonceBytes + sodium.crypto_secretbox_MACBYTES) {
    throw new KeyFileError(`the encrypted seed is ${box.length} bytes: too short to be one`);
  }
  const key = await deriveKey(password, salt, params);
  try {
    return sodium.crypto_secretbox_open_easy(box.subarray(nonceBytes), box.subarray(0, nonceBytes), key);
  } catch {
    throw new WrongPassword(wrongPasswordMessage);
  } finally {
    sodium.memzero(key);
  }
}

/** The bytes of a strict base64 field, else KeyFileError with `message`. */
export function base64Field(text, message) {
  const bytes = fromBase64(text);
  if (bytes === null) {
    throw new KeyFileError(message);
  }
  return bytes;
}
