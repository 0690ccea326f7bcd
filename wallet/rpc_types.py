"""The answers of CometBFT's JSON-RPC, as typed values (the decoding half of `trolly.wallet.rpc`).

CometBFT v0.38 encodes 64-bit integers as JSON strings, bytes as base64 and hashes as upper-case hex; the
helpers here undo that, so the rest of the wallet sees ints, bytes and upper-case hex strings.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any


def parse_int(value: Any, default: int = 0) -> int:
    """A CometBFT integer (a JSON string or number; empty or null means `default`)."""
    return default if value in (None, "") else int(value)


def parse_base64(value: Any) -> bytes:
    return base64.b64decode(value) if value else b""


def hash_hex(tx_hash: bytes | str) -> str:
    """Upper-case hex of a tx hash given as bytes or as (any-case, optionally 0x-prefixed) hex."""
    if isinstance(tx_hash, bytes):
        return tx_hash.hex().upper()
    text = tx_hash.strip()
    if text.lower().startswith("0x"):
        text = text[2:]
    bytes.fromhex(text)  # raises ValueError on bad hex
    return text.upper()


@dataclass(frozen=True)
class Event:
    type: str
    attributes: tuple[tuple[str, str], ...]

    def get(self, key: str, default: str | None = None) -> str | None:
        return next((value for name, value in self.attributes if name == key), default)

    def to_json(self) -> dict:
        return {"type": self.type, "attributes": [{"key": k, "value": v} for k, v in self.attributes]}


@dataclass(frozen=True)
class NodeStatus:
    chain_id: str
    latest_block_height: int
    latest_block_hash: str
    latest_app_hash: str
    latest_block_time: str
    catching_up: bool
    node_id: str
    version: str
    raw: dict = field(repr=False, compare=False, default_factory=dict)

    def to_json(self) -> dict:
        return {
            "chain_id": self.chain_id,
            "latest_block_height": self.latest_block_height,
            "latest_block_hash": self.latest_block_hash,
            "latest_app_hash": self.latest_app_hash,
            "latest_block_time": self.latest_block_time,
            "catching_up": self.catching_up,
            "node_id": self.node_id,
            "version": self.version,
        }


@dataclass(frozen=True)
class ProofOp:
    type: str
    key: bytes
    data: bytes


@dataclass(frozen=True)
class QueryResult:
    """An ABCI query answer; `value` is the raw bytes, `json()` decodes Trolly's canonical JSON values."""

    path: str
    code: int
    codespace: str
    log: str
    info: str
    """Why no proof came, when one was asked for and none did."""
    key: bytes
    value: bytes
    height: int
    proof_ops: tuple[ProofOp, ...]

    def json(self) -> Any:
        return json.loads(self.value) if self.value else None


@dataclass(frozen=True)
class BroadcastResult:
    """CheckTx's verdict on a transaction handed to the mempool (`broadcast_tx_sync`)."""

    hash: str
    code: int
    codespace: str
    log: str


@dataclass(frozen=True)
class TxResult:
    """A transaction as included in a block, with its execution result."""

    hash: str
    height: int
    index: int
    code: int
    codespace: str
    log: str
    events: tuple[Event, ...]
    tx: bytes

    def to_json(self) -> dict:
        return {
            "hash": self.hash,
            "height": self.height,
            "index": self.index,
            "code": self.code,
            "codespace": self.codespace,
            "log": self.log,
            "events": [event.to_json() for event in self.events],
        }


@dataclass(frozen=True)
class ValidatorInfo:
    address: str
    pubkey: bytes
    pubkey_type: str
    voting_power: int
    proposer_priority: int

    def to_json(self) -> dict:
        return {
            "address": self.address,
            "pubkey": base64.b64encode(self.pubkey).decode(),
            "pubkey_type": self.pubkey_type,
            "voting_power": self.voting_power,
            "proposer_priority": self.proposer_priority,
        }


@dataclass(frozen=True)
class BlockHeader:
    chain_id: str
    height: int
    time: str
    app_hash: bytes
    last_block_hash: str
    block_hash: str
    num_txs: int


def parse_events(raw: list | None) -> tuple[Event, ...]:
    return tuple(
        Event(item.get("type", ""), tuple((a.get("key", ""), a.get("value", "")) for a in item.get("attributes") or []))
        for item in raw or []
    )


def parse_tx_result(raw: dict) -> TxResult:
    """A `tx` answer, or one entry of a `tx_search` answer."""
    result = raw.get("tx_result") or {}
    return TxResult(
        hash=str(raw.get("hash", "")).upper(),
        height=parse_int(raw.get("height")),
        index=parse_int(raw.get("index")),
        code=parse_int(result.get("code")),
        codespace=result.get("codespace") or "",
        log=result.get("log") or "",
        events=parse_events(result.get("events")),
        tx=parse_base64(raw.get("tx")),
    )
