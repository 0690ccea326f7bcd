// The proof a recipient of a bad data key box sends with its report (MsgReportBadKey): the box's Diffie-Hellman
// point S and a Chaum-Pedersen proof that S was made with this worker's secret scalar, so the chain opens the
// box itself without learning the secret (chain/box_proofs.py says why and checks it; wallet/box_proofs.py's
// `prove_box_opening` makes it in Python: the same bytes here for the same seed and box).
//
//   const proof = await proveBoxOpening(seed, sealedBox);   // Uint8Array(96): S || c || z
//
// The group operations are libsodium's (ed25519 points and scalars mod L); the one field operation libsodium
// does not offer, lifting the box's Montgomery u to an Edwards y = (u-1)/(u+1), is done in BigInt. The nonce is
// derived from the secret and the box, never drawn: the same report re-sent is the same bytes, and no two proofs
// with different challenges share a nonce (which would give the secret away).

import { sodiumReady } from "./sodium.js";

const FIELD_PRIME = 2n ** 255n - 19n;
const GROUP_ORDER = 2n ** 252n + 27742317777372353535851937790883648493n;
const POINT_BYTES = 32;
const SEALED_BOX_BYTES = 80;
export const PROOF_BYTES = 96;
const CHALLENGE_TAG = new TextEncoder().encode("trolly/sealed-box-complaint/v1");
const NONCE_TAG = new TextEncoder().encode("trolly/sealed-box-complaint/nonce/v1");

function littleEndian(bytes) {
  let value = 0n;
  for (let i = bytes.length - 1; i >= 0; i -= 1) value = (value << 8n) | BigInt(bytes[i]);
  return value;
}

function toLittleEndian(value, length = 32) {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i += 1) {
    bytes[i] = Number(value & 0xffn);
    value >>= 8n;
  }
  return bytes;
}

function modPow(base, exponent, modulus) {
  let result = 1n;
  base %= modulus;
  for (; exponent > 0n; exponent >>= 1n) {
    if (exponent & 1n) result = (result * base) % modulus;
    base = (base * base) % modulus;
  }
  return result;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** 8P for P the Edwards lift of the box's ephemeral key as X25519 reads it; null when the box is not a sealed
 * key's length or the key has no lift of large order (nothing could open such a box: its proof is not read). */
function ephemeralBase(sodium, sealedBox) {
  if (sealedBox.length !== SEALED_BOX_BYTES) return null;
  const u = (littleEndian(sealedBox.subarray(0, POINT_BYTES)) & (2n ** 255n - 1n)) % FIELD_PRIME;
  if (u === FIELD_PRIME - 1n) return null;
  const y = ((u - 1n + FIELD_PRIME) * modPow(u + 1n, FIELD_PRIME - 2n, FIELD_PRIME)) % FIELD_PRIME;
  let point = toLittleEndian(y);
  try {
    for (let i = 0; i < 3; i += 1) point = sodium.crypto_core_ed25519_add(point, point); // 8P by doublings
  } catch {
    return null; // no x for this y: u lies on the twist
  }
  return sodium.crypto_core_ed25519_is_valid_point(point) ? point : null;
}

/** k with a = 8k, a the clamped first half of sha512(seed) (the worker's X25519 and ed25519 scalar), mod L. */
function secretScalar(expanded) {
  const clamped = Uint8Array.from(expanded.subarray(0, 32));
  clamped[0] &= 248;
  clamped[31] &= 127;
  clamped[31] |= 64;
  return toLittleEndian((littleEndian(clamped) >> 3n) % GROUP_ORDER);
}

/** The proof (PROOF_BYTES) of the box's shared secret by the holder of the ed25519 `seed`; zero bytes for a box
 * whose ephemeral key is no usable point (the chain reads no proof for it). */
export async function proveBoxOpening(seed, sealedBox) {
  if (seed.length !== 32) throw new Error("an ed25519 seed is 32 bytes");
  const sodium = await sodiumReady();
  const base = ephemeralBase(sodium, sealedBox);
  if (base === null) return new Uint8Array(PROOF_BYTES);
  const expanded = sodium.crypto_hash_sha512(seed);
  const secret = secretScalar(expanded);
  const publicKey = sodium.crypto_sign_seed_keypair(seed).publicKey;
  const cofactorBase = sodium.crypto_scalarmult_ed25519_base_noclamp(toLittleEndian(8n));
  const shared = sodium.crypto_scalarmult_ed25519_noclamp(secret, base);
  const nonce = sodium.crypto_core_ed25519_scalar_reduce(sodium.crypto_hash_sha512(concat(NONCE_TAG, expanded,
    sealedBox)));
  const challenge = sodium.crypto_core_ed25519_scalar_reduce(sodium.crypto_hash_sha512(concat(CHALLENGE_TAG,
    publicKey, sealedBox, base, shared, sodium.crypto_scalarmult_ed25519_noclamp(nonce, cofactorBase),
    sodium.crypto_scalarmult_ed25519_noclamp(nonce, base))));
  const response = sodium.crypto_core_ed25519_scalar_add(nonce, sodium.crypto_core_ed25519_scalar_mul(challenge,
    secret));
  return concat(shared, challenge, response);
}
