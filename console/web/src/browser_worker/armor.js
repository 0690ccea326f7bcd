// The wallet's exported key (`trolly-wallet keys export`, wallet/armor.py) read in the browser, so a worker
// key made with the CLI can be brought into a tab:
//
//     -----BEGIN TROLLY PRIVATE KEY-----
//     kdf: argon2id
//     opslimit: 3
//     memlimit: 268435456
//     salt: <base64>
//     type: ed25519
//     address: trolly1...
//
//     <base64 of SecretBox(seed), 64 characters a line>
//     -----END TROLLY PRIVATE KEY-----
//
// Read as the wallet reads it: the headers parsed, the costs bounded before any hashing, the seed opened with
// the password, and the address header checked against the key inside, so an armor whose header was edited
// is refused. Every refusal is a KeyFileError (WrongPassword for the password) with a message a page shows.
import { KeyFileError } from "./chain_errors.js";
import { keyFromSeed } from "./keys.js";
import { base64Field, checkKdfParams, openSeed } from "./password_box.js";

export const BEGIN = "-----BEGIN TROLLY PRIVATE KEY-----";
export const END = "-----END TROLLY PRIVATE KEY-----";

/** The key inside a wallet armor opened with `password`. */
export async function importArmoredKey(text, password) {
  const { headers, box } = parseArmor(text);
  if (headers.kdf !== "argon2id" || headers.type !== "ed25519") {
    throw new KeyFileError("unsupported armor: expected kdf argon2id and type ed25519");
  }
  const params = checkKdfParams({ opslimit: headerNumber(headers, "opslimit"),
    memlimit: headerNumber(headers, "memlimit") }, "armor header");
  const salt = base64Field(headers.salt ?? "", "malformed armor header: salt is not base64");
  const seed = await openSeed(box, password, salt, params,
    "wrong password for this armored key (or the armor was altered)");
  const key = await keyFromSeed(seed);
  if (headers.address !== key.address) {
    throw new KeyFileError("armor header address does not match the key inside it");
  }
  return key;
}

function parseArmor(text) {
  const lines = String(text).trim().split(/\r?\n/).map((line) => line.trim());
  if (lines[0] !== BEGIN || lines[lines.length - 1] !== END) {
    throw new KeyFileError(`not an armored Trolly key: expected ${BEGIN} ... ${END}`);
  }
  const inner = lines.slice(1, -1);
  const split = inner.indexOf("");
  if (split < 0) {
    throw new KeyFileError("malformed armor: no blank line between headers and body");
  }
  const headers = {};
  for (const line of inner.slice(0, split)) {
    const colon = line.indexOf(":");
    if (colon < 0) {
      throw new KeyFileError(`malformed armor header line ${JSON.stringify(line)}`);
    }
    headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
  }
  const box = base64Field(inner.slice(split + 1).join(""), "malformed armor body: not base64");
  return { headers, box };
}

function headerNumber(headers, name) {
  const text = headers[name];
  if (text === undefined) {
    throw new KeyFileError(`malformed armor header: no ${name}`);
  }
  if (!/^[0-9]{1,20}$/.test(text)) {
    throw new KeyFileError(`malformed armor header: ${name} must be a decimal number, got ${JSON.stringify(text.slice(0, 40))}`);
  }
  return Number(text);
}
