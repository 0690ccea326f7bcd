"""Which state key a proven query reads, and which of its answer's fields the proven record fixes.

Each provable query path maps to an `Expectation`: the state key the wallet derives itself from the path (never
the node's say), and a check that the answer's fields equal those decoded from the proven record (None: the
key is proven absent). The record layouts are the chain's own (`trolly.chain.accounts`, `validators`,
`market.records`, `signing_info`, `gov.store`); docs/protocol.md writes them out for clients in other languages.

A validator's signing info is stored under its consensus address, which the path (`/signing_info/<operator>`)
does not name: `signing_info_expectation` takes it from the validator's own proven record
(`proven_views.prove_signing_info`), never from the answer being checked. A consensus key never changes once
the validator is created, so the address proven at one height holds at the next.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Callable

from trolly.chain import keys
from trolly.chain.accounts import decode_account
from trolly.chain.codec import decode_u64
from trolly.chain.crypto import encode_address
from trolly.chain.gov.queries import proposal_json
from trolly.chain.gov.store import Proposal
from trolly.chain.market.queries import task_summary
from trolly.chain.market.records import Task, Worker, decode_record
from trolly.chain.modules.staking_queries import validator_json
from trolly.chain.signing_info import SigningInfo, decode_signing_info
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


def _proposal(record: bytes | None) -> dict:
    try:
        return proposal_json(Proposal.from_json(json.loads(_present(record))))
    except (ValueError, KeyError, TypeError) as exc:
        raise ProofInvalid(f"the proven record is not a proposal ({exc})") from None


def _signing_info(operator: bytes, consensus_address: bytes) -> Callable[[bytes | None], dict]:
    def expected(record: bytes | None) -> dict:
        # no record yet (never seen in a commit): the chain answers an empty one, as `signing_info_json` does
        info = SigningInfo(consensus_address, 0) if record is None else decode_signing_info(record)
        if info.consensus_address != consensus_address:
            raise ProofInvalid("the proven signing info is for another consensus address")
        return {"operator": encode_address(operator), "consensus_address": info.consensus_address.hex().upper(),
                "start_height": info.start_height, "index_offset": info.index_offset,
                "missed_blocks_counter": info.missed_blocks_counter, "jailed_until": info.jailed_until,
                "tombstoned": info.tombstoned}
    return expected


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
_PROPOSAL_FIELDS = ("id", "proposer", "title", "summary", "changes", "status", "submit_height", "deposit_end_height",
                    "total_deposit", "voting_start_height", "voting_end_height", "final_tally", "outcome")
_SIGNING_INFO_FIELDS = ("operator", "consensus_address", "start_height", "index_offset", "missed_blocks_counter",
                        "jailed_until", "tombstoned")
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
    if len(parts) == 3 and parts[:2] == ["gov", "proposal"] and parts[2].isdigit() and len(parts[2]) <= 20:
        return Expectation(keys.gov_proposal_key(int(parts[2])), _PROPOSAL_FIELDS, _proposal)
    if len(parts) == 2 and parts[0] == "signing_info":
        raise ProofInvalid(f"{path}: the signing info's key is the validator's consensus address; prove the "
                           "validator first (proven_views.prove_signing_info)")
    raise ProofInvalid(f"no proof covers the answer of {path}")


def signing_info_expectation(operator: str, consensus_address: bytes) -> Expectation:
    """`/signing_info/<operator>`'s Expectation, keyed by the consensus address read from the validator's proven
    record. `jailed` (the validator record's) and the window and threshold (params) are not in this record."""
    owner = parse_address(operator)
    return Expectation(keys.signing_info_key(consensus_address), _SIGNING_INFO_FIELDS,
                       _signing_info(owner, consensus_address))
