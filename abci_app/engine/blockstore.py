"""The solo engine's block store: its own LevelDB under `<home>/data/solo_engine.db`.

What CometBFT keeps in `blockstore.db`, `state.db` and `tx_index.db`, in one database:

    b"B" + height         the block: header, block id, txs, last commit (JSON, RPC form)
    b"Q" + height         the exact RequestFinalizeBlock sent for it (what the handshake replays)
    b"R" + height         the ResponseFinalizeBlock (tx results, events, validator updates, app hash)
    b"V" + height         the validator set for that height (validator updates apply two heights later)
    b"K" + block hash     the block's height
    b"T" + tx hash        (height, index) of a committed transaction
    b"E" + attr + value   (height, index) for every indexed tx event attribute, for tx_search
    b"M"                  metadata: last height, initial height, InitChain outcome

A block and everything derived from it go in one synchronous write batch, written after FinalizeBlock
and before Commit: once it is there the block is decided, and an app that died before committing it gets it
replayed by the handshake. Heights are 8-byte big-endian so keys sort by height.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from dataclasses import dataclass
from typing import Iterator

import plyvel

from ..proto.tendermint.abci import types_pb2
from . import EngineError
from .hashing import sha256

BLOCK = b"B"
REQUEST = b"Q"
RESULTS = b"R"
VALIDATORS = b"V"
TX = b"T"
BLOCK_HASH = b"K"
EVENT = b"E"
META = b"M"


def _height_key(prefix: bytes, height: int) -> bytes:
    return prefix + height.to_bytes(8, "big")


def _position(height: int, index: int) -> bytes:
    return struct.pack(">QI", height, index)


def _unpack_position(raw: bytes) -> tuple[int, int]:
    return struct.unpack(">QI", raw)


def _field(text: str) -> bytes:
    """Length-prefixed UTF-8, so (key, value) pairs can never run into each other inside an index key."""
    raw = text.encode()
    return len(raw).to_bytes(4, "big") + raw


def event_index_prefix(composite_key: str, value: str) -> bytes:
    return EVENT + _field(composite_key) + _field(value)


@dataclass(frozen=True)
class StoredBlock:
    """A block as the RPC shows it, plus what the engine needs to replay it."""

    height: int
    time_ns: int
    block_hash: bytes
    header: dict
    block_id: dict
    txs: tuple[bytes, ...]
    last_commit: dict

    def to_json(self) -> dict:
        return {
            "height": self.height,
            "time_ns": self.time_ns,
            "block_hash": self.block_hash.hex(),
            "header": self.header,
            "block_id": self.block_id,
            "txs": [base64.b64encode(tx).decode() for tx in self.txs],
            "last_commit": self.last_commit,
        }

    @staticmethod
    def from_json(data: dict) -> "StoredBlock":
        return StoredBlock(
            height=data["height"],
            time_ns=data["time_ns"],
            block_hash=bytes.fromhex(data["block_hash"]),
            header=data["header"],
            block_id=data["block_id"],
            txs=tuple(base64.b64decode(tx) for tx in data["txs"]),
            last_commit=data["last_commit"],
        )


Validators = list[tuple[bytes, int]]  # (ed25519 pubkey, power), in CometBFT set order


def encode_validators(validators: Validators) -> bytes:
    return json.dumps([[pubkey.hex(), power] for pubkey, power in validators]).encode()


def decode_validators(raw: bytes) -> Validators:
    return [(bytes.fromhex(pubkey), power) for pubkey, power in json.loads(raw)]


class BlockStore:
    """Blocks, results, validator sets and indexes of one chain; one writer (the producer)."""

    def __init__(self, path: str | os.PathLike) -> None:
        os.makedirs(os.fspath(path), exist_ok=True)
        try:
            self._db = plyvel.DB(os.fspath(path), create_if_missing=True)
        except plyvel.IOError as exc:
            raise EngineError(f"cannot open the engine block store at {path}: {exc}") from None
        raw = self._db.get(META)
        self._meta = json.loads(raw) if raw else {"last_height": 0}

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------------------------------- meta

    @property
    def last_height(self) -> int:
        """Height of the last stored (decided) block; 0 before the first."""
        return self._meta["last_height"]

    @property
    def initial_height(self) -> int | None:
        return self._meta.get("initial_height")

    @property
    def init_chain(self) -> dict | None:
        """What InitChain settled: {"app_hash": hex, "consensus_params": {...}} or None before InitChain."""
        return self._meta.get("init_chain")

    @property
    def earliest_height(self) -> int:
        return self.initial_height or 1

    def save_init_chain(self, initial_height: int, app_hash: bytes, consensus_params: dict, validators: Validators) -> None:
        """Record InitChain's outcome and the first two validator sets (heights initial and initial + 1)."""
        meta = dict(self._meta)
        meta.update(
            initial_height=initial_height,
            init_chain={"app_hash": app_hash.hex(), "consensus_params": consensus_params},
        )
        with self._db.write_batch(sync=True) as batch:
            batch.put(_height_key(VALIDATORS, initial_height), encode_validators(validators))
            batch.put(_height_key(VALIDATORS, initial_height + 1), encode_validators(validators))
            batch.put(META, json.dumps(meta).encode())
        self._meta = meta

    # ------------------------------------------------------------------------------------------ write

    def save_block(
        self,
        block: StoredBlock,
        request: types_pb2.RequestFinalizeBlock,
        response: types_pb2.ResponseFinalizeBlock,
        next_next_validators: Validators,
        consensus_params: dict | None = None,
    ) -> None:
        """Persist a decided block with its results and indexes in one synchronous batch.

        `consensus_params` is the new params when FinalizeBlock changed them (recorded in the same batch).
        """
        if block.height != self.last_height + 1 and not (self.last_height == 0 and block.height == self.initial_height):
            raise EngineError(f"block {block.height} does not follow stored height {self.last_height}")
        meta = dict(self._meta, last_height=block.height)
        if consensus_params is not None:
            meta["init_chain"] = dict(meta["init_chain"], consensus_params=consensus_params)
        with self._db.write_batch(sync=True) as batch:
            batch.put(_height_key(BLOCK, block.height), json.dumps(block.to_json()).encode())
            batch.put(BLOCK_HASH + block.block_hash, block.height.to_bytes(8, "big"))
            batch.put(_height_key(REQUEST, block.height), request.SerializeToString(deterministic=True))
            batch.put(_height_key(RESULTS, block.height), response.SerializeToString(deterministic=True))
            batch.put(_height_key(VALIDATORS, block.height + 2), encode_validators(next_next_validators))
            for index, tx in enumerate(block.txs):
                position = _position(block.height, index)
                batch.put(TX + sha256(tx), position)
                if index < len(response.tx_results):
                    for composite_key, value in indexed_attributes(response.tx_results[index].events):
                        batch.put(event_index_prefix(composite_key, value) + position, b"")
            batch.put(META, json.dumps(meta).encode())
        self._meta = meta

    # ------------------------------------------------------------------------------------------- read

    def block(self, height: int) -> StoredBlock | None:
        raw = self._db.get(_height_key(BLOCK, height))
        return StoredBlock.from_json(json.loads(raw)) if raw else None

    def request(self, height: int) -> types_pb2.RequestFinalizeBlock | None:
        raw = self._db.get(_height_key(REQUEST, height))
        return types_pb2.RequestFinalizeBlock.FromString(raw) if raw is not None else None

    def results(self, height: int) -> types_pb2.ResponseFinalizeBlock | None:
        raw = self._db.get(_height_key(RESULTS, height))
        return types_pb2.ResponseFinalizeBlock.FromString(raw) if raw is not None else None

    def validators(self, height: int) -> Validators | None:
        raw = self._db.get(_height_key(VALIDATORS, height))
        return decode_validators(raw) if raw else None

    def app_hash_after(self, height: int) -> bytes | None:
        """The app hash committed by block `height` (what block height+1's header carries)."""
        results = self.results(height)
        return None if results is None else results.app_hash

    def height_of_block(self, block_hash: bytes) -> int | None:
        raw = self._db.get(BLOCK_HASH + block_hash)
        return int.from_bytes(raw, "big") if raw else None

    def tx_position(self, tx_hash: bytes) -> tuple[int, int] | None:
        raw = self._db.get(TX + tx_hash)
        return _unpack_position(raw) if raw else None

    def positions_with_attribute(self, composite_key: str, value: str) -> list[tuple[int, int]]:
        """(height, index) of every tx with an indexed event attribute `composite_key` equal to `value`."""
        return list(self.iter_positions_with_attribute(composite_key, value))

    def iter_positions_with_attribute(self, composite_key: str, value: str) -> Iterator[tuple[int, int]]:
        """The same, one at a time, in (height, index) order: a search can stop part way."""
        prefix = event_index_prefix(composite_key, value)
        with self._db.iterator(prefix=prefix, include_value=False) as keys:
            for key in keys:
                yield _unpack_position(key[len(prefix):])


def indexed_attributes(events) -> list[tuple[str, str]]:
    """("type.key", value) of every attribute marked `index` (the ones CometBFT's kv indexer keeps)."""
    pairs = []
    for event in events:
        if not event.type:
            continue
        for attribute in event.attributes:
            if attribute.index and attribute.key:
                pairs.append((f"{event.type}.{attribute.key}", attribute.value))
    return pairs
