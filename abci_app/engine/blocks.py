"""Building a solo-engine block: the last commit, the header, the block id, and the events it publishes.

Pure functions of the block store and the block being made, kept apart from the producer's loop. The
header follows CometBFT v0.38's fields and hashing rules (see `hashing` for the one documented
difference: the block hash itself); the last commit carries this validator's signature over
`hashing.vote_sign_bytes` and marks every other validator of the set absent (the solo engine cannot sign
for them).
"""

from __future__ import annotations

from trolly.chain.codec import canonical_json

from ..home import ValidatorKey, format_time
from ..proto.tendermint.abci import types_pb2
from ..proto.tendermint.types import validator_pb2
from . import hashing, rpc_encoding
from .blockstore import BlockStore, StoredBlock, Validators
from .chainstate import consensus_address, consensus_hash
from .event_bus import EventBus, PublishedEvent

BLOCK_PROTOCOL_VERSION = 11
P2P_PROTOCOL_VERSION = 8
EMPTY_BLOCK_ID = {"hash": "", "parts": {"total": 0, "hash": ""}}


def last_commit(store: BlockStore, key: ValidatorKey, chain_id: str, height: int, previous: StoredBlock | None, time_ns: int):
    """(ABCI votes, RPC `last_commit`) for block height-1: this validator signed; others in the set are absent."""
    if previous is None:
        return [], {"height": "0", "round": 0, "block_id": EMPTY_BLOCK_ID, "signatures": []}
    voters: Validators = store.validators(height - 1) or []
    votes, signatures = [], []
    for pubkey, power in voters:
        address = consensus_address(pubkey)
        signed = address == key.address
        flag = validator_pb2.BLOCK_ID_FLAG_COMMIT if signed else validator_pb2.BLOCK_ID_FLAG_ABSENT
        votes.append(types_pb2.VoteInfo(validator=types_pb2.Validator(address=address, power=power), block_id_flag=flag))
        if signed:
            signature = key.private_key.sign(hashing.vote_sign_bytes(chain_id, height - 1, previous.block_hash))
            signatures.append(
                {
                    "block_id_flag": 2,
                    "validator_address": rpc_encoding.hex_upper(address),
                    "timestamp": format_time(time_ns),
                    "signature": rpc_encoding.b64(signature),
                }
            )
        else:
            signatures.append({"block_id_flag": 1, "validator_address": "", "timestamp": "0001-01-01T00:00:00Z", "signature": None})
    return votes, {"height": str(height - 1), "round": 0, "block_id": previous.block_id, "signatures": signatures}


def header(
    store: BlockStore,
    chain_id: str,
    app_version: int,
    proposer: bytes,
    height: int,
    time_ns: int,
    previous: StoredBlock | None,
    txs: list[bytes],
    commit: dict,
    validators: Validators,
    next_validators: Validators,
    params: dict,
) -> dict:
    """The RPC-form header; `app_hash` is what block height-1 (or InitChain) left, as in v0.38."""
    if previous is None:
        app_hash = bytes.fromhex(store.init_chain["app_hash"])
        last_results = hashing.last_results_hash([])
    else:
        previous_results = store.results(height - 1)
        app_hash = previous_results.app_hash
        last_results = hashing.last_results_hash(list(previous_results.tx_results))
    hex_upper = rpc_encoding.hex_upper
    return {
        "version": {"block": str(BLOCK_PROTOCOL_VERSION), "app": str(app_version)},
        "chain_id": chain_id,
        "height": str(height),
        "time": format_time(time_ns),
        "last_block_id": previous.block_id if previous else EMPTY_BLOCK_ID,
        "last_commit_hash": hex_upper(hashing.merkle_root([canonical_json(s) for s in commit["signatures"]])),
        "data_hash": hex_upper(hashing.data_hash(txs)),
        "validators_hash": hex_upper(hashing.validators_hash(validators)),
        "next_validators_hash": hex_upper(hashing.validators_hash(next_validators)),
        "consensus_hash": hex_upper(consensus_hash(params)),
        "app_hash": hex_upper(app_hash),
        "last_results_hash": hex_upper(last_results),
        "evidence_hash": hex_upper(hashing.merkle_root([])),
        "proposer_address": hex_upper(proposer),
    }


def block_id(block_hash: bytes) -> dict:
    parts = hashing.parts_hash(block_hash)
    return {"hash": rpc_encoding.hex_upper(block_hash), "parts": {"total": 1, "hash": rpc_encoding.hex_upper(parts)}}


def publish(events: EventBus, block: StoredBlock, response: types_pb2.ResponseFinalizeBlock) -> None:
    """NewBlock, NewBlockHeader and NewBlockEvents for the block, then one Tx event per transaction."""
    if not events.subscriber_count:
        return
    block_events = block_event_map(response)
    events.publish(
        PublishedEvent(
            events=dict(block_events, **{"tm.event": ["NewBlockHeader"]}),
            data=lambda: {"type": "tendermint/event/NewBlockHeader", "value": {"header": block.header}},
        )
    )
    events.publish(
        PublishedEvent(
            events=dict(block_events, **{"tm.event": ["NewBlockEvents"]}),
            data=lambda: {
                "type": "tendermint/event/NewBlockEvents",
                "value": {
                    "height": str(block.height),
                    "events": [rpc_encoding.event_json(e) for e in response.events],
                    "num_txs": str(len(block.txs)),
                },
            },
        )
    )
    events.publish(
        PublishedEvent(
            events=block_events,
            data=lambda: {
                "type": "tendermint/event/NewBlock",
                "value": {
                    "block": rpc_encoding.block_json(block),
                    "block_id": block.block_id,
                    "result_finalize_block": rpc_encoding.finalize_block_json(response),
                },
            },
        )
    )
    for index, (tx, result) in enumerate(zip(block.txs, response.tx_results)):
        events.publish(
            PublishedEvent(
                events=tx_event_map(tx, block.height, result),
                data=lambda tx=tx, index=index, result=result: rpc_encoding.tx_event_value(tx, block.height, index, result),
            )
        )


def block_event_map(response: types_pb2.ResponseFinalizeBlock) -> dict[str, list[str]]:
    events: dict[str, list[str]] = {"tm.event": ["NewBlock"]}
    for event in response.events:
        for attribute in event.attributes:
            if event.type and attribute.key:
                events.setdefault(f"{event.type}.{attribute.key}", []).append(attribute.value)
    return events


def tx_event_map(tx: bytes, height: int, result: types_pb2.ExecTxResult) -> dict[str, list[str]]:
    events: dict[str, list[str]] = {
        "tm.event": ["Tx"],
        "tx.hash": [rpc_encoding.hex_upper(hashing.sha256(tx))],
        "tx.height": [str(height)],
    }
    for event in result.events:
        for attribute in event.attributes:
            if event.type and attribute.key:
                events.setdefault(f"{event.type}.{attribute.key}", []).append(attribute.value)
    return events
