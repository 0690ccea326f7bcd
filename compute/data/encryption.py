"""A private dataset's shards encrypted under its data key, and that key sealed to each member who may read it.

The requester draws a data key (32 random bytes) when it packs its data, and another for each task it submits
the pack to (`packing.for_one_task` re-encrypts the shards under it); every shard is stored as
`secretbox(key, shard)` (PyNaCl's XSalsa20-Poly1305: `CIPHER`, the name the manifest gives). The content hash
of a shard is over these encrypted bytes, so blob services, the chain's hashes and every hash check work on
ciphertext unchanged, and whoever fetches a shard without the key (a stranger, the network, another task's
worker) holds bytes it cannot read.

The nonce of a shard is derived from the key and the shard's plain bytes (keyed BLAKE2b), so packing the same
data under the same key gives the same blobs and the same manifest hash; two equal shards encrypt equally,
which reveals only that they are equal.

A task's key reaches a member sealed to it: an X25519 sealed box (`nacl.public.SealedBox`; the requester seals
with `trolly.wallet.box_proofs.seal_with_sender_proof`, the same bytes with the sender's proof) to the
Curve25519 form of the member's ed25519 account key (`to_curve25519_public_key`), opened with its ed25519
signing key (`open_data_key`). Only that key opens it. docs/privacy.md says what this protects against and what it does not.
"""

from __future__ import annotations

import nacl.encoding
import nacl.exceptions
import nacl.hash
import nacl.public
import nacl.secret
import nacl.signing
import nacl.utils

from ..errors import DatasetError

CIPHER = "xsalsa20poly1305"
"""The cipher a private dataset's manifest names (`"cipher"`): PyNaCl's secretbox."""

KEY_BYTES = nacl.secret.SecretBox.KEY_SIZE
SEALED_KEY_BYTES = KEY_BYTES + nacl.public.PublicKey.SIZE + 16
"""A sealed data key's length: the key, an ephemeral X25519 public key (32) and the Poly1305 tag (16)."""


class DataKeyError(DatasetError):
    """A data key is missing, malformed, sealed to another key, or does not open a shard (wrong key, or
    bytes changed after encryption)."""


def new_data_key() -> bytes:
    """A fresh data key from the operating system's random source."""
    return nacl.utils.random(KEY_BYTES)


def check_data_key(key: bytes) -> bytes:
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise DataKeyError(f"a data key is {KEY_BYTES} bytes")
    return key


def _nonce(key: bytes, plain: bytes) -> bytes:
    return nacl.hash.blake2b(plain, key=key, digest_size=nacl.secret.SecretBox.NONCE_SIZE,
                             person=b"trolly-shard", encoder=nacl.encoding.RawEncoder)


def encrypt_shard(key: bytes, plain: bytes) -> bytes:
    """`plain` encrypted under `key`: nonce (24 bytes) || ciphertext with its tag."""
    box = nacl.secret.SecretBox(check_data_key(key))
    return bytes(box.encrypt(plain, _nonce(key, plain)))


def decrypt_shard(key: bytes, data: bytes) -> bytes:
    """The plain bytes of an encrypted shard; DataKeyError when `key` is not its key or a byte changed."""
    box = nacl.secret.SecretBox(check_data_key(key))
    try:
        return box.decrypt(data)
    except nacl.exceptions.CryptoError:
        raise DataKeyError("the shard does not open with this data key (another task's key, or changed bytes)") from None


def seal_data_key(key: bytes, recipient_public_key: bytes) -> bytes:
    """`key` sealed to the holder of the ed25519 public key `recipient_public_key` (32 bytes)."""
    try:
        curve = nacl.signing.VerifyKey(recipient_public_key).to_curve25519_public_key()
    except (nacl.exceptions.CryptoError, ValueError, TypeError):
        raise DataKeyError("the recipient's public key is not an ed25519 key") from None
    return bytes(nacl.public.SealedBox(curve).encrypt(check_data_key(key)))


def open_data_key(sealed: bytes, signing_key: nacl.signing.SigningKey) -> bytes:
    """The data key in `sealed`, opened with the recipient's ed25519 signing key; DataKeyError when it was
    sealed to another key or is malformed."""
    if len(sealed) != SEALED_KEY_BYTES:
        raise DataKeyError(f"a sealed data key is {SEALED_KEY_BYTES} bytes, got {len(sealed)}")
    box = nacl.public.SealedBox(signing_key.to_curve25519_private_key())
    try:
        return check_data_key(box.decrypt(sealed))
    except nacl.exceptions.CryptoError:
        raise DataKeyError("the sealed data key does not open with this key: it was sealed to another member") from None
