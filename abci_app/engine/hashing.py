"""The hashes in a solo-engine block header, and Merkle proofs of transactions.

Merkle trees follow RFC 6962 exactly as CometBFT's `crypto/merkle` does (leaf = sha256(0x00 || item),
inner = sha256(0x01 || left || right), split at the largest power of two below the item count, empty tree =
sha256("")), so `data_hash` (over sha256 of each tx), tx proofs, `validators_hash` (over each validator's
protobuf `SimpleValidator`) and `last_results_hash` (over each result's deterministic `ExecTxResult` with
code, data, gas_wanted and gas_used only) are computed the way CometBFT computes them.

The block hash is the one deliberate difference: CometBFT Merkle-hashes the protobuf of each header field;
the solo engine hashes `HEADER_DOMAIN || canonical_json(header)`, where `header` is the header exactly as
the RPC shows it (strings only: heights as decimal strings, hashes as upper-case hex, time as RFC 3339).
It is deterministic and unique per block (the header holds chain id, height, time and the previous block's
hash), which is all clients rely on.
"""

from __future__ import annotations

import hashlib

from trolly.chain.codec import canonical_json

from ..framing import encode_uvarint
from ..proto.tendermint.abci import types_pb2

HEADER_DOMAIN = b"trolly/solo-engine/header/v1\x00"
PARTS_DOMAIN = b"trolly/solo-engine/parts/v1\x00"
VOTE_DOMAIN = b"trolly/solo-engine/vote/v1\x00"


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _split_point(length: int) -> int:
    """Largest power of two strictly less than `length` (length >= 2)."""
    return 1 << ((length - 1).bit_length() - 1)


def leaf_hash(item: bytes) -> bytes:
    return sha256(b"\x00" + item)


def inner_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def merkle_root(items: list[bytes]) -> bytes:
    if not items:
        return sha256(b"")
    if len(items) == 1:
        return leaf_hash(items[0])
    split = _split_point(len(items))
    return inner_hash(merkle_root(items[:split]), merkle_root(items[split:]))


def merkle_aunts(items: list[bytes], index: int) -> list[bytes]:
    """Sibling hashes from the leaf at `index` up to the root, lowest first (CometBFT `Proof.Aunts`)."""
    if len(items) <= 1:
        return []
    split = _split_point(len(items))
    if index < split:
        return merkle_aunts(items[:split], index) + [merkle_root(items[split:])]
    return merkle_aunts(items[split:], index - split) + [merkle_root(items[:split])]


def root_from_aunts(leaf: bytes, index: int, total: int, aunts: list[bytes]) -> bytes:
    """Recompute the root from a leaf hash and its aunts (what a light client does with a tx proof)."""
    if total == 1:
        if aunts:
            raise ValueError("a one-leaf tree has no aunts")
        return leaf
    if not aunts:
        raise ValueError("missing aunts")
    split = _split_point(total)
    if index < split:
        return inner_hash(root_from_aunts(leaf, index, split, aunts[:-1]), aunts[-1])
    return inner_hash(aunts[-1], root_from_aunts(leaf, index - split, total - split, aunts[:-1]))


def data_hash(txs: list[bytes]) -> bytes:
    """CometBFT `Txs.Hash()`: the Merkle root over sha256 of each transaction."""
    return merkle_root([sha256(tx) for tx in txs])


def simple_validator_bytes(pubkey: bytes, power: int) -> bytes:
    """Protobuf `tendermint.types.SimpleValidator{pub_key: PublicKey{ed25519}, voting_power}`."""
    public_key = b"\x0a" + encode_uvarint(len(pubkey)) + pubkey  # PublicKey.ed25519 = 1
    encoded = b"\x0a" + encode_uvarint(len(public_key)) + public_key  # SimpleValidator.pub_key = 1
    if power:
        encoded += b"\x10" + encode_uvarint(power & 0xFFFFFFFFFFFFFFFF)  # SimpleValidator.voting_power = 2
    return encoded


def validators_hash(validators: list[tuple[bytes, int]]) -> bytes:
    """CometBFT `ValidatorSet.Hash()` over (pubkey, power) already in set order."""
    return merkle_root([simple_validator_bytes(pubkey, power) for pubkey, power in validators])


def last_results_hash(tx_results: list[types_pb2.ExecTxResult]) -> bytes:
    """CometBFT `TxResultsHash`: only the deterministic fields (code, data, gas_wanted, gas_used) count."""
    leaves = []
    for result in tx_results:
        deterministic = types_pb2.ExecTxResult(
            code=result.code, data=result.data, gas_wanted=result.gas_wanted, gas_used=result.gas_used
        )
        leaves.append(deterministic.SerializeToString(deterministic=True))
    return merkle_root(leaves)


def header_hash(header: dict) -> bytes:
    """The block hash: sha256 over the domain tag and the canonical JSON of the RPC-form header."""
    return sha256(HEADER_DOMAIN + canonical_json(header))


def parts_hash(block_hash: bytes) -> bytes:
    """Hash of the block's single "part" (the solo engine never splits blocks for gossip)."""
    return sha256(PARTS_DOMAIN + block_hash)


def vote_sign_bytes(chain_id: str, height: int, block_hash: bytes) -> bytes:
    """What the solo validator signs for its precommit on a block (documented, not CometBFT's CanonicalVote)."""
    return VOTE_DOMAIN + chain_id.encode() + b"\x00" + height.to_bytes(8, "big") + block_hash
