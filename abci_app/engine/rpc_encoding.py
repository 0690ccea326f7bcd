"""CometBFT v0.38 JSON shapes for everything the RPC returns.

Two encoders coexist in CometBFT, and clients see both, so this module reproduces each where it applies:

* `cmtjson` (most results): 64-bit integers as JSON strings, `[]byte` as base64, `HexBytes` (hashes,
  addresses) as upper-case hex, times as RFC 3339 with nanoseconds, keys as `{"type", "value"}`;
  `omitempty` fields are left out when zero (e.g. in `abci_info`).
* `jsonpb` with defaults emitted, for ExecTxResult, ResponseCheckTx, ResponseQuery and EventAttribute:
  every field present, int64 as strings, bytes as base64 (null when empty), camelCase where the .proto has
  no `json_name` (hence `proofOps` but `gas_wanted`).
"""

from __future__ import annotations

import base64

from ..home import PUBKEY_TYPE
from ..proto.tendermint.abci import types_pb2
from .chainstate import consensus_address, consensus_params_update_json


def hex_upper(data: bytes) -> str:
    return data.hex().upper()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def b64_or_null(data: bytes) -> str | None:
    """jsonpb's rendering of a proto3 bytes field: base64, or null when empty (a nil Go slice)."""
    return b64(data) if data else None


def pub_key(pubkey: bytes) -> dict:
    return {"type": PUBKEY_TYPE, "value": b64(pubkey)}


# ------------------------------------------------------------------------------------------- jsonpb


def event_json(event: types_pb2.Event) -> dict:
    return {
        "type": event.type,
        "attributes": [{"key": a.key, "value": a.value, "index": a.index} for a in event.attributes],
    }


def exec_tx_result_json(result: types_pb2.ExecTxResult) -> dict:
    return {
        "code": result.code,
        "data": b64_or_null(result.data),
        "log": result.log,
        "info": result.info,
        "gas_wanted": str(result.gas_wanted),
        "gas_used": str(result.gas_used),
        "events": [event_json(e) for e in result.events],
        "codespace": result.codespace,
    }


def check_tx_json(response: types_pb2.ResponseCheckTx) -> dict:
    return {
        "code": response.code,
        "data": b64_or_null(response.data),
        "log": response.log,
        "info": response.info,
        "gas_wanted": str(response.gas_wanted),
        "gas_used": str(response.gas_used),
        "events": [event_json(e) for e in response.events],
        "codespace": response.codespace,
    }


def query_json(response: types_pb2.ResponseQuery) -> dict:
    proof = None
    if response.HasField("proof_ops"):
        proof = {
            "ops": [{"type": op.type, "key": b64_or_null(op.key), "data": b64_or_null(op.data)} for op in response.proof_ops.ops]
        }
    return {
        "code": response.code,
        "log": response.log,
        "info": response.info,
        "index": str(response.index),
        "key": b64_or_null(response.key),
        "value": b64_or_null(response.value),
        "proofOps": proof,
        "height": str(response.height),
        "codespace": response.codespace,
    }


# ------------------------------------------------------------------------------------------ cmtjson


def info_json(response: types_pb2.ResponseInfo) -> dict:
    """ResponseInfo through cmtjson: fields at their zero value are omitted (`omitempty`)."""
    out: dict = {}
    if response.data:
        out["data"] = response.data
    if response.version:
        out["version"] = response.version
    if response.app_version:
        out["app_version"] = str(response.app_version)
    if response.last_block_height:
        out["last_block_height"] = str(response.last_block_height)
    if response.last_block_app_hash:
        out["last_block_app_hash"] = b64(response.last_block_app_hash)
    return out


def validator_update_json(update: types_pb2.ValidatorUpdate) -> dict:
    out: dict = {"pub_key": {"Sum": {"type": "tendermint.crypto.PublicKey_Ed25519", "value": {"ed25519": b64(update.pub_key.ed25519)}}}}
    if update.power:
        out["power"] = str(update.power)
    return out


def block_results_json(height: int, response: types_pb2.ResponseFinalizeBlock) -> dict:
    """`block_results`: every key present; an empty list is null (a nil Go slice through cmtjson)."""
    return {
        "height": str(height),
        "txs_results": [exec_tx_result_json(r) for r in response.tx_results] or None,
        "finalize_block_events": [event_json(e) for e in response.events] or None,
        "validator_updates": [validator_update_json(u) for u in response.validator_updates] or None,
        "consensus_param_updates": (
            consensus_params_update_json(response.consensus_param_updates)
            if response.HasField("consensus_param_updates")
            else None
        ),
        "app_hash": b64(response.app_hash),
    }


def finalize_block_json(response: types_pb2.ResponseFinalizeBlock) -> dict:
    """`result_finalize_block` inside a NewBlock event: the ResponseFinalizeBlock through cmtjson, whose
    `omitempty` tags leave out empty fields."""
    out = block_results_json(0, response)
    fields = {
        "events": out["finalize_block_events"],
        "tx_results": out["txs_results"],
        "validator_updates": out["validator_updates"],
        "consensus_param_updates": out["consensus_param_updates"],
        "app_hash": out["app_hash"] if response.app_hash else None,
    }
    return {key: value for key, value in fields.items() if value}


def block_json(block) -> dict:
    """`{"header", "data", "evidence", "last_commit"}` of a StoredBlock."""
    return {
        "header": block.header,
        "data": {"txs": [b64(tx) for tx in block.txs]},
        "evidence": {"evidence": []},
        "last_commit": block.last_commit,
    }


def validator_json(pubkey: bytes, power: int, proposer_priority: int = 0) -> dict:
    return {
        "address": hex_upper(consensus_address(pubkey)),
        "pub_key": pub_key(pubkey),
        "voting_power": str(power),
        "proposer_priority": str(proposer_priority),
    }


def tx_result_json(tx: bytes, height: int, index: int, result: types_pb2.ExecTxResult, tx_hash: bytes, proof: dict | None = None) -> dict:
    out = {
        "hash": hex_upper(tx_hash),
        "height": str(height),
        "index": index,
        "tx_result": exec_tx_result_json(result),
        "tx": b64(tx),
    }
    if proof is not None:
        out["proof"] = proof
    return out


def tx_event_value(tx: bytes, height: int, index: int, result: types_pb2.ExecTxResult) -> dict:
    """Data of a websocket `Tx` event: `{"type": "tendermint/event/Tx", "value": {"TxResult": ...}}`."""
    inner: dict = {"height": str(height), "index": index, "tx": b64(tx), "result": exec_tx_result_json(result)}
    if not index:
        del inner["index"]  # abci.TxResult's `index,omitempty` through cmtjson
    return {"type": "tendermint/event/Tx", "value": {"TxResult": inner}}
