// The worker key as the page keeps it in localStorage: its seed sealed under the tab's password (argon2id +
// secretbox, password_box.js), never the seed itself, and never sent anywhere. The stored text is JSON:
//
//     {"format": "trolly-browser-key/1", "kdf": "argon2id", "opslimit": 3, "memlimit": 268435456,
//      "salt": <base64>, "box": <base64 of nonce || secretbox(seed)>, "address": "trolly1..."}
//
// The address is there in clear so the page can say which key it holds before asking for the password; it is
// checked against the key inside on opening, as the wallet's armor header is.
//
// Cost: libsodium's MODERATE level (3 passes over 256 MiB), the level the wallet's keyring and `keys export`
// use. What it protects against is someone who copies the browser profile and guesses passwords offline, the
// same threat as a keyring file on disk, so it gets the same cost per guess. The page pays it once per unlock
// (a second or so), not per transaction; INTERACTIVE (64 MiB) would make every offline guess four times
// cheaper for a saving nobody waits on. Stored costs are bounded on opening (INTERACTIVE to SENSITIVE), so an
// edited entry can neither weaken the check below INTERACTIVE nor make the tab allocate gigabytes.
import { KeyFileError } from "./chain_errors.js";
import { keyFromSeed } from "./keys.js";
import { toBase64 } from "./bytes_text.js";
import { MODERATE, base64Field, checkKdfParams, openSeed, sealSeed } from "./password_box.js";

export { importArmoredKey } from "./armor.js";

export const STORAGE_FORMAT = "trolly-browser-key/1";
export const STORAGE_KDF_PARAMS = MODERATE;
export const MIN_PASSWORD_LENGTH = 8;

/** The JSON text to keep in localStorage for `key`, sealed under `password` (at least 8 characters). */
export async function sealForStorage(key, password) {
  if (typeof password !== "string" || password.length < MIN_PASSWORD_LENGTH) {
    throw new KeyFileError(`the password must be at least ${MIN_PASSWORD_LENGTH} characters`);
  }
  const { salt, box } = await sealSeed(key.seed, password, STORAGE_KDF_PARAMS);
  return JSON.stringify({
    format: STORAGE_FORMAT,
    kdf: "argon2id",
    opslimit: STORAGE_KDF_PARAMS.opslimit,
    memlimit: STORAGE_KDF_PARAMS.memlimit,
    salt: toBase64(salt),
    box: toBase64(box),
    address: key.address,
  });
}

/** The address a stored key claims, readable without the password (checked on opening). */
export function storedAddress(json) {
  return parseStored(json).address;
}

/** The key kept by `sealForStorage`, opened with `password`; WrongPassword when it does not open. */
export async function openFromStorage(json, password) {
  const stored = parseStored(json);
  const params = checkKdfParams({ opslimit: stored.opslimit, memlimit: stored.memlimit }, "the stored key");
  const salt = base64Field(String(stored.salt), "the stored key's salt is not base64");
  const box = base64Field(String(stored.box), "the stored key's box is not base64");
  const seed = await openSeed(box, password, salt, params, "wrong password for the key stored in this browser");
  const key = await keyFromSeed(seed);
  if (stored.address !== key.address) {
    throw new KeyFileError("the stored key's address does not match the key inside it (the entry was edited)");
  }
  return key;
}

function parseStored(json) {
  let stored;
  try {
    stored = JSON.parse(json);
  } catch {
    throw new KeyFileError("the stored key is not JSON: not a key this page stored");
  }
  if (stored === null || typeof stored !== "object" || stored.format !== STORAGE_FORMAT || stored.kdf !== "argon2id") {
    throw new KeyFileError(`the stored key is not a ${STORAGE_FORMAT} entry`);
  }
  return stored;
}
