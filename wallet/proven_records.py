"""Which state key a proven query reads, and which of its answer's fields the proven record fixes.

Each provable query path maps to an `Expectation`: the state key the wallet derives itself from the path (never
the node's say), and a check that the answer's fields equal those decoded from the proven record (None: the
key is proven absent). The record layouts are the chain's own (`trolly.chain.accounts`, `validators`,
`market.records`); docs/protocol.md writes them out for clients in other languages.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Callable

from trolly.chain import keys
from trolly.chain.accounts import decode_account
from trolly.chain.codec import decode_u64
from trolly.chain.market.queries import task_summary
from trolly.chain.market.records import Task, Worker, decode_record
from trolly.chain.modules.staking_queries import validator_json
from trolly.chain.validators import decode_validator

from .errors import ProofInvalid
from .txbuilder import parse_address


@dataclass(frozen=True)
class Expectation:
    key: bytes
    fields: tuple[str, ...]
    expected: Callable[[bytes | None], dict]
    """The answer's proven fields as the record (None: absent) makes them; ProofInvalid when it cannot be."""

    def check(self, record: bytes | None, answer: Any) -> None:
        expected = self.expected(record)
        if not isinstance(answer, dict):
            raise ProofInvalid("the answer is not an object")
        wrong = sorted(name for name in self.fields if answer.get(name, _MISSING) != expected[name])
        if wrong:
            raise ProofInvalid(f"the answer's {', '.join(wrong)} differ from the proven record")


_MISSING = object()


def _present(record: bytes | None) -> bytes:
    if record is None:
        raise ProofInvalid("the node answered a value for a key it proved absent")
    return record


def _account(record: bytes | None) -> dict:
    balance, nonce, pub_key = (0, 0, b"") if record is None else decode_account(record)
    return {"balance": balance, "nonce": nonce, "pub_key": base64.b64encode(pub_key).decode() if pub_key else None}


def _validator(record: bytes | None) -> dict:
    return validator_json(decode_validator(_present(record)))


def _task(record: bytes | None) -> dict:
    return task_summary(decode_record(Task, _present(record)))


def _worker(record: bytes | None) -> dict:
    if record is None:  # only unbonding stake left: the answer must not show a registration
        return {name: _MISSING for name in _WORKER_FIELDS} | {"registered": False}
    worker = decode_record(Worker, record)
    return {"registered": True, "stake": worker.stake, "blob_url": worker.blob_url, "relay": worker.relay,
            "hardware": worker.hardware, "registered_height": worker.registered_height, "tasks": worker.tasks,
            "earned": worker.earned, "slashed": worker.slashed, "penalized": worker.penalized}


def _supply(record: bytes | None) -> dict:
    return {"supply": 0 if record is None else decode_u64(record)}


_ACCOUNT_FIELDS = ("balance", "nonce", "pub_key")
_VALIDATOR_FIELDS = ("operator", "consensus_pubkey", "consensus_address", "stake", "power", "moniker", "jailed",
                     "delegator_shares", "commission_rate", "max_rate", "max_change_rate", "commission_update_height",
                     "details")
_TASK_FIELDS = (
    "id", "requester", "spec_hash", "status", "phase", "round", "rounds", "workers_wanted", "workers_joined",
    "active_members", "reward_per_round", "collateral", "budget", "escrow_remaining", "paid_workers", "paid_fees",
    "refunded", "final_weights_hash", "open_slots", "replacements")
_WORKER_FIELDS = ("registered", "stake", "blob_url", "relay", "hardware", "registered_height", "tasks", "earned",
                  "slashed", "penalized")


def expectation_for(path: str) -> Expectation:
    """The Expectation of a provable query path; ProofInvalid for a path whose answer no single record proves."""
    parts = path.strip("/").split("/")
    if parts == ["supply"]:
        return Expectation(keys.SUPPLY, ("supply",), _supply)
    if len(parts) == 2 and parts[0] == "account":
        return Expectation(keys.account_key(parse_address(parts[1])), _ACCOUNT_FIELDS, _account)
    if len(parts) == 2 and parts[0] == "validator":
        return Expectation(keys.validator_key(parse_address(parts[1])), _VALIDATOR_FIELDS, _validator)
    if len(parts) == 3 and parts[:2] == ["market", "task"] and parts[2].isdigit():
        return Expectation(keys.market_task_key(int(parts[2])), _TASK_FIELDS, _task)
    if len(parts) == 3 and parts[:2] == ["market", "worker"]:
        return Expectation(keys.market_worker_key(parse_address(parts[2])), _WORKER_FIELDS, _worker)
    raise ProofInvalid(f"no proof covers the answer of {path}")
