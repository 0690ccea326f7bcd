"""Conversions between CometBFT's ABCI protobuf types and the chain's own dataclasses.

The chain (`trolly.chain.block`) knows nothing of protobuf or CometBFT; the adapter turns requests into a
`BlockEnv` (votes, misbehavior, time in integer nanoseconds) and results into ABCI messages (events with
every attribute indexed, ed25519 validator updates) with these helpers.
"""

from __future__ import annotations

from typing import Any

from trolly.chain.block import Event, Misbehavior, TxResult, VoteInfo

from .proto.tendermint.abci import types_pb2 as abci
from .proto.tendermint.crypto import keys_pb2
from .proto.tendermint.types import validator_pb2


def timestamp_ns(timestamp: Any) -> int:
    """A google.protobuf.Timestamp as integer nanoseconds since the epoch."""
    return timestamp.seconds * 1_000_000_000 + timestamp.nanos


def add_events(target: Any, events: list[Event]) -> None:
    """Append chain events to a repeated ABCI `Event` field; every attribute is indexed so `tx_search` finds it.

    Filled in place with `add()` rather than built and copied: this runs for every event of every tx.
    """
    for event in events:
        attributes = target.add(type=event.type).attributes
        for key, value in event.attributes:
            attributes.add(key=key, value=value, index=True)


def fill_tx_result(target: Any, result: TxResult, events: bool = True) -> Any:
    """Write a chain TxResult into a fresh ExecTxResult (FinalizeBlock) or ResponseCheckTx: they share field
    numbers. `events=False` leaves the events out (CheckTx's answer, which nothing reads them from). A plain
    success (every field at its default, the common case) leaves the fields untouched: setting each to its
    default is what most of the time of this call would go to, for the same bytes."""
    if result.code or result.log or result.codespace or result.data or result.gas_wanted or result.gas_used:
        target.code = result.code
        target.data = result.data
        target.log = result.log
        target.codespace = result.codespace
        target.gas_wanted = result.gas_wanted
        target.gas_used = result.gas_used
    if events:
        add_events(target.events, result.events)
    return target


def encode_validator_updates(updates) -> list[abci.ValidatorUpdate]:
    return [abci.ValidatorUpdate(pub_key=keys_pb2.PublicKey(ed25519=update.pubkey), power=update.power)
            for update in updates]


def decode_votes(commit_info: abci.CommitInfo) -> tuple[VoteInfo, ...]:
    """A vote counts as signed unless CometBFT marks it absent (a nil vote still proves liveness)."""
    return tuple(
        VoteInfo(vote.validator.address, vote.validator.power,
                 vote.block_id_flag != validator_pb2.BLOCK_ID_FLAG_ABSENT)
        for vote in commit_info.votes
    )


def decode_misbehavior(evidence) -> tuple[Misbehavior, ...]:
    return tuple(
        Misbehavior(kind=item.type, validator_address=item.validator.address, power=item.validator.power,
                    height=item.height, time_ns=timestamp_ns(item.time),
                    total_voting_power=item.total_voting_power)
        for item in evidence
    )
