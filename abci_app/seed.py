"""A sampling seed no single party chooses, from ABCI 2.0 vote extensions (docs/protocol.md 4.3).

Every validator extends its precommit for height h with the same deterministic bytes, `extension_for(h)`;
CometBFT signs them with the validator's consensus key (ed25519 signatures are deterministic, so a validator
has exactly one signature per height and cannot grind it, and nobody else can compute it). The proposer of
height h + 1 takes the extended commit's signatures that verify, from validators holding more than two thirds
of h's power, and puts them as the block's first transaction, in ascending validator-address order
(`build_seed_tx`). ProcessProposal and FinalizeBlock check that transaction against the validators'
consensus keys and the block's last commit (`verify_seed_tx`); the block's sampling seed is
sha256("trolly/sampling-seed/v1" || that transaction's body). A block without one (a network whose genesis
leaves them disabled; a proposer that omits it; the first solo-engine block after a restart) has no seed:
the market then defers sampling when `seed_from_extensions` is set, as every genesis Trolly writes sets it,
and otherwise falls back to the block hash. The solo engine extends its own votes (docs/engines.md).

The bias left: the proposer chooses which qualifying subset of the signatures it received to include (every
subset holding more than two thirds of the power gives another seed), and whether to include one at all
(then the block hash it builds is the seed). `chain/market/params.py` prices this as `seed_choices`.

The signed bytes are CometBFT's `VoteExtensionSignBytes`: the varint-length-delimited protobuf of
CanonicalVoteExtension{extension = 1 (bytes), height = 2 (sfixed64), round = 3 (sfixed64), chain_id = 4
(string)}, fields at their default value left out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from trolly.chain import validators
from trolly.chain.crypto import verify_signature
from trolly.chain.state import State

from .framing import encode_uvarint
from .proto.tendermint.types import validator_pb2

SEED_TX_PREFIX = b"\x00trolly/seed-tx/v1"
"""Starts every seed transaction; a signed transaction's envelope can never start with a zero byte."""
EXTENSION_TAG = b"trolly/seed-extension/v1"
SEED_TAG = b"trolly/sampling-seed/v1"
SIGNATURE_LENGTH = 64
ADDRESS_LENGTH = 20


class InvalidSeedTx(ValueError):
    """A seed transaction that does not prove more than two thirds of the power signed its height."""


def extension_for(height: int) -> bytes:
    """The vote extension every validator sends for `height`."""
    return EXTENSION_TAG + height.to_bytes(8, "big")


def extension_sign_bytes(chain_id: str, height: int, round_: int, extension: bytes) -> bytes:
    """CometBFT's VoteExtensionSignBytes for a vote at (height, round) carrying `extension`."""
    body = bytearray()
    if extension:
        body += b"\x0a" + encode_uvarint(len(extension)) + extension
    if height:
        body += b"\x11" + (height & (2**64 - 1)).to_bytes(8, "little")
    if round_:
        body += b"\x19" + (round_ & (2**64 - 1)).to_bytes(8, "little")
    if chain_id:
        encoded = chain_id.encode()
        body += b"\x22" + encode_uvarint(len(encoded)) + encoded
    return encode_uvarint(len(body)) + bytes(body)


@dataclass(frozen=True)
class SeedProof:
    height: int
    round: int
    signatures: tuple[tuple[bytes, bytes], ...]
    """(consensus address, extension signature), ascending by address."""

    def encode(self) -> bytes:
        out = bytearray(SEED_TX_PREFIX)
        out += self.height.to_bytes(8, "big") + self.round.to_bytes(4, "big") + len(self.signatures).to_bytes(2, "big")
        for address, signature in self.signatures:
            out += address + signature
        return bytes(out)

    @classmethod
    def decode(cls, tx: bytes) -> "SeedProof":
        body = tx[len(SEED_TX_PREFIX):]
        if not tx.startswith(SEED_TX_PREFIX) or len(body) < 14:
            raise InvalidSeedTx("not a seed transaction")
        height, round_, count = (int.from_bytes(body[0:8], "big"), int.from_bytes(body[8:12], "big"),
                                 int.from_bytes(body[12:14], "big"))
        entry = ADDRESS_LENGTH + SIGNATURE_LENGTH
        if len(body) != 14 + count * entry:
            raise InvalidSeedTx(f"a seed transaction of {count} signatures must be {14 + count * entry} bytes")
        signatures = tuple((body[14 + i * entry:14 + i * entry + ADDRESS_LENGTH],
                            body[14 + i * entry + ADDRESS_LENGTH:14 + (i + 1) * entry]) for i in range(count))
        if [a for a, _ in signatures] != sorted({a for a, _ in signatures}):
            raise InvalidSeedTx("seed signatures must be in strictly ascending validator-address order")
        return cls(height, round_, signatures)


def is_seed_tx(tx: bytes) -> bool:
    return tx.startswith(SEED_TX_PREFIX)


def _consensus_key(state: State, address: bytes) -> bytes | None:
    operator = validators.operator_by_consensus_address(state, address)
    validator = validators.get_validator(state, operator) if operator is not None else None
    return validator.consensus_pubkey if validator is not None else None


def _signed(state: State, chain_id: str, height: int, round_: int, address: bytes, signature: bytes) -> bool:
    key = _consensus_key(state, address)
    message = extension_sign_bytes(chain_id, height, round_, extension_for(height))
    return key is not None and len(signature) == SIGNATURE_LENGTH and verify_signature(key, message, signature)


def _more_than_two_thirds(part: int, total: int) -> bool:
    return total > 0 and 3 * part > 2 * total


def build_seed_tx(state: State, chain_id: str, height: int, extended_commit) -> bytes | None:
    """The seed transaction for block `height` from PrepareProposal's `local_last_commit`, or None when the
    verified extensions of height - 1 do not hold more than two thirds of its power."""
    previous = height - 1
    total = sum(vote.validator.power for vote in extended_commit.votes)
    chosen: dict[bytes, bytes] = {}
    power = 0
    for vote in extended_commit.votes:
        address = bytes(vote.validator.address)
        if (vote.block_id_flag != validator_pb2.BLOCK_ID_FLAG_COMMIT or vote.vote_extension != extension_for(previous)
                or address in chosen
                or not _signed(state, chain_id, previous, extended_commit.round, address, vote.extension_signature)):
            continue
        chosen[address] = bytes(vote.extension_signature)
        power += vote.validator.power
    if previous < 1 or not _more_than_two_thirds(power, total):
        return None
    return SeedProof(previous, extended_commit.round, tuple(sorted(chosen.items()))).encode()


def verify_seed_tx(state: State, chain_id: str, height: int, tx: bytes, last_commit) -> bytes:
    """The sampling seed a block's seed transaction proves; raises InvalidSeedTx. `last_commit` is the block's
    CommitInfo (ProcessProposal's proposed_last_commit, FinalizeBlock's decided_last_commit): it gives the
    round and each signer's power."""
    proof = SeedProof.decode(tx)
    if proof.height != height - 1 or proof.round != last_commit.round:
        raise InvalidSeedTx(f"the seed transaction proves height {proof.height} round {proof.round}, the block's "
                            f"last commit is height {height - 1} round {last_commit.round}")
    powers = {bytes(vote.validator.address): vote.validator.power for vote in last_commit.votes}
    power = 0
    for address, signature in proof.signatures:
        if address not in powers:
            raise InvalidSeedTx(f"validator {address.hex().upper()} is not in the block's last commit")
        if not _signed(state, chain_id, proof.height, proof.round, address, signature):
            raise InvalidSeedTx(f"the extension signature of validator {address.hex().upper()} does not verify")
        power += powers[address]
    if not _more_than_two_thirds(power, sum(powers.values())):
        raise InvalidSeedTx(f"the seed signatures hold {power} of {sum(powers.values())} power, not more than 2/3")
    return hashlib.sha256(SEED_TAG + tx[len(SEED_TX_PREFIX):]).digest()
