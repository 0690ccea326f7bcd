"""Genesis, consensus params and validator sets: the consensus-side state the engine keeps beside blocks.

A validator set is a list of (ed25519 pubkey, power) in CometBFT's order (power descending, then address
ascending). Updates returned by FinalizeBlock at height H take effect at H + 2, as in CometBFT: the set for
H + 1 was already fixed (it is `next_validators_hash` in block H's header).
"""

from __future__ import annotations

import base64
import hashlib
import json

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ..home import PUBKEY_TYPE, parse_time
from ..proto.tendermint.abci import types_pb2
from ..proto.tendermint.crypto import keys_pb2
from ..proto.tendermint.types import params_pb2
from . import EngineError
from .blockstore import Validators


def consensus_address(pubkey: bytes) -> bytes:
    return hashlib.sha256(pubkey).digest()[:20]


def sort_validators(validators: Validators) -> Validators:
    return sorted(validators, key=lambda item: (-item[1], consensus_address(item[0])))


def apply_validator_updates(current: Validators, updates) -> Validators:
    """The set after ABCI `ValidatorUpdate`s: power 0 removes, any other power sets."""
    powers = dict(current)
    for update in updates:
        pubkey = update.pub_key.ed25519
        if not pubkey or len(pubkey) != 32:
            raise EngineError(f"validator update with a non-ed25519 key: {update.pub_key}")
        if update.power < 0:
            raise EngineError(f"validator update with negative power {update.power}")
        if update.power == 0:
            powers.pop(pubkey, None)
        else:
            powers[pubkey] = update.power
    return sort_validators(list(powers.items()))


def validator_updates_from_set(validators: Validators) -> list[types_pb2.ValidatorUpdate]:
    return [
        types_pb2.ValidatorUpdate(pub_key=keys_pb2.PublicKey(ed25519=pubkey), power=power)
        for pubkey, power in validators
    ]


def genesis_validators(genesis: dict) -> Validators:
    validators = []
    for entry in genesis.get("validators") or []:
        if entry["pub_key"]["type"] != PUBKEY_TYPE:
            raise EngineError(f"genesis validator key type {entry['pub_key']['type']!r} is not supported")
        validators.append((base64.b64decode(entry["pub_key"]["value"]), int(entry["power"])))
    return sort_validators(validators)


def timestamp(time_ns: int) -> Timestamp:
    return Timestamp(seconds=time_ns // 1_000_000_000, nanos=time_ns % 1_000_000_000)


def timestamp_ns(value: Timestamp) -> int:
    return value.seconds * 1_000_000_000 + value.nanos


def params_to_proto(params: dict) -> params_pb2.ConsensusParams:
    """Genesis-JSON consensus params (64-bit integers as strings) to the protobuf InitChain carries."""
    max_age = int(params["evidence"]["max_age_duration"])
    return params_pb2.ConsensusParams(
        block=params_pb2.BlockParams(max_bytes=int(params["block"]["max_bytes"]), max_gas=int(params["block"]["max_gas"])),
        evidence=params_pb2.EvidenceParams(
            max_age_num_blocks=int(params["evidence"]["max_age_num_blocks"]),
            max_age_duration=Duration(seconds=max_age // 1_000_000_000, nanos=max_age % 1_000_000_000),
            max_bytes=int(params["evidence"]["max_bytes"]),
        ),
        validator=params_pb2.ValidatorParams(pub_key_types=list(params["validator"]["pub_key_types"])),
        version=params_pb2.VersionParams(app=int(params.get("version", {}).get("app", 0))),
        abci=params_pb2.ABCIParams(
            vote_extensions_enable_height=int(params.get("abci", {}).get("vote_extensions_enable_height", 0))
        ),
    )


def consensus_params_update_json(update: params_pb2.ConsensusParams) -> dict:
    """The parts a consensus params update sets, in CometBFT's JSON form (64-bit integers as strings)."""
    out: dict = {}
    if update.HasField("block"):
        out["block"] = {"max_bytes": str(update.block.max_bytes), "max_gas": str(update.block.max_gas)}
    if update.HasField("evidence"):
        duration = update.evidence.max_age_duration
        out["evidence"] = {
            "max_age_num_blocks": str(update.evidence.max_age_num_blocks),
            "max_age_duration": str(duration.seconds * 1_000_000_000 + duration.nanos),
            "max_bytes": str(update.evidence.max_bytes),
        }
    if update.HasField("validator"):
        out["validator"] = {"pub_key_types": list(update.validator.pub_key_types)}
    if update.HasField("version"):
        out["version"] = {"app": str(update.version.app)}
    if update.HasField("abci"):
        out["abci"] = {"vote_extensions_enable_height": str(update.abci.vote_extensions_enable_height)}
    return out


def merge_params(current: dict, update: params_pb2.ConsensusParams) -> dict:
    """Apply a consensus params update (from InitChain or FinalizeBlock) to the JSON form; unset parts stay."""
    merged = json.loads(json.dumps(current))
    merged.update(consensus_params_update_json(update))
    return merged


def consensus_hash(params: dict) -> bytes:
    """CometBFT `ConsensusParams.Hash()`: sha256 of the protobuf HashedParams (block max bytes and gas)."""
    hashed = params_pb2.HashedParams(
        block_max_bytes=int(params["block"]["max_bytes"]), block_max_gas=int(params["block"]["max_gas"])
    )
    return hashlib.sha256(hashed.SerializeToString(deterministic=True)).digest()


def max_data_bytes(params: dict, validator_count: int) -> int:
    """Room left for txs in a block (CometBFT `MaxDataBytes`): max_bytes minus header, commit and evidence."""
    max_bytes = int(params["block"]["max_bytes"])
    if max_bytes == -1:
        max_bytes = 100 * 1024 * 1024
    overhead = 11 + 626 + 11 + validator_count * 109 + int(params["evidence"]["max_bytes"])
    return max(max_bytes - overhead, 0)


def raw_app_state(genesis_text: str) -> bytes | None:
    """The `app_state` value exactly as written in genesis.json (CometBFT passes these very bytes, a Go
    `json.RawMessage`, as `app_state_bytes`); None if the document has none."""
    decoder = json.JSONDecoder()
    position = _skip_space(genesis_text, 0)
    if genesis_text[position:position + 1] != "{":
        raise EngineError("genesis.json is not a JSON object")
    position = _skip_space(genesis_text, position + 1)
    while genesis_text[position:position + 1] not in ("}", ""):
        key, position = decoder.raw_decode(genesis_text, position)
        position = _skip_space(genesis_text, position)
        if genesis_text[position:position + 1] != ":":
            raise EngineError("genesis.json: expected ':' after a key")
        start = _skip_space(genesis_text, position + 1)
        _, end = decoder.raw_decode(genesis_text, start)
        if key == "app_state":
            return genesis_text[start:end].encode()
        position = _skip_space(genesis_text, end)
        if genesis_text[position:position + 1] == ",":
            position = _skip_space(genesis_text, position + 1)
    return None


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def init_chain_request(genesis: dict, genesis_text: str | None = None) -> types_pb2.RequestInitChain:
    """RequestInitChain exactly as CometBFT builds it from genesis.json (pass the file's text to get the
    `app_state` bytes verbatim; without it they are re-serialised)."""
    app_state = genesis.get("app_state")
    raw = raw_app_state(genesis_text) if genesis_text is not None else None
    if raw is None and app_state is not None:
        raw = json.dumps(app_state).encode()
    return types_pb2.RequestInitChain(
        time=timestamp(parse_time(genesis["genesis_time"])),
        chain_id=genesis["chain_id"],
        consensus_params=params_to_proto(genesis["consensus_params"]),
        validators=validator_updates_from_set(genesis_validators(genesis)),
        app_state_bytes=raw or b"",
        initial_height=int(genesis.get("initial_height") or 1),
    )
