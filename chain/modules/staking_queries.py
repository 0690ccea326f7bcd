"""Staking queries: validators (with their commission and delegator count), delegations, unbonding and
redelegation entries. Every answer is JSON of integers and text; addresses are bech32 (`trolly1...`)."""

from __future__ import annotations

import base64

from .. import keys
from ..crypto import decode_address, encode_address
from ..delegating import delegation_tokens
from ..delegations import delegations_of, delegations_to
from ..errors import InvalidRequest, NotFound
from ..listing_index import indexed_keys
from ..module import QueryResult, QueryRoute
from ..state import State
from ..unbonding import redelegations_of, unbonding_entries_of_delegator
from ..validators import Validator, get_validator, iterate_validators, validator_self_bond


def validator_json(validator: Validator) -> dict:
    return {
        "operator": encode_address(validator.operator),
        "consensus_pubkey": base64.b64encode(validator.consensus_pubkey).decode(),
        "consensus_address": validator.consensus_address.hex().upper(),
        "stake": validator.stake,
        "power": validator.power,
        "moniker": validator.moniker,
        "jailed": validator.jailed,
        "delegator_shares": str(validator.delegator_shares),
        "commission_rate": validator.commission.rate,
        "max_rate": validator.commission.max_rate,
        "max_change_rate": validator.commission.max_change_rate,
        "commission_update_height": validator.commission_update_height,
        "details": validator.details,
    }


def query_validators(state: State, arg: str, data: bytes) -> QueryResult:
    if arg:
        raise InvalidRequest("/validators takes no argument; use /validator/<operator>")
    return QueryResult([validator_json(v) for v in iterate_validators(state)])


def query_validator(state: State, arg: str, data: bytes) -> QueryResult:
    """One validator, with its self-bond and how many delegations it has (counted in their listing index)."""
    operator = decode_address(arg)
    validator = get_validator(state, operator)
    if validator is None:
        raise NotFound(f"{arg} operates no validator")
    answer = validator_json(validator)
    answer["self_bond"] = validator_self_bond(state, validator)
    answer["delegators"] = len(indexed_keys(state, keys.DELEGATION_BY_VALIDATOR + operator))
    return QueryResult(answer, proof_key=keys.validator_key(operator))


def delegation_rows(state: State, delegations) -> list[dict]:
    rows = []
    for delegation in delegations:
        validator = get_validator(state, delegation.validator)
        assert validator is not None, "delegation to a missing validator"
        rows.append({"delegator": encode_address(delegation.delegator),
                     "validator": encode_address(delegation.validator),
                     "shares": str(delegation.shares),
                     "amount": delegation_tokens(delegation, validator)})
    return rows


def query_delegations(state: State, arg: str, data: bytes) -> QueryResult:
    """A delegator's delegations: validator, shares and what they are worth in utrl now."""
    delegator = decode_address(arg)
    rows = delegation_rows(state, delegations_of(state, delegator))
    return QueryResult({"delegator": arg, "delegations": rows, "total": sum(row["amount"] for row in rows)})


def query_validator_delegations(state: State, arg: str, data: bytes) -> QueryResult:
    """Every delegation to one validator."""
    operator = decode_address(arg)
    if get_validator(state, operator) is None:
        raise NotFound(f"{arg} operates no validator")
    rows = delegation_rows(state, delegations_to(state, operator))
    return QueryResult({"validator": arg, "delegations": rows, "total": sum(row["amount"] for row in rows)})


def query_unbonding(state: State, arg: str, data: bytes) -> QueryResult:
    """A delegator's unbonding entries (an operator's own unbonds among them)."""
    delegator = decode_address(arg)
    entries = [
        {"validator": encode_address(e.operator), "amount": e.amount, "initial_balance": e.initial_balance,
         "creation_height": e.creation_height, "maturity_height": e.maturity_height}
        for e in unbonding_entries_of_delegator(state, delegator)
    ]
    return QueryResult({"delegator": arg, "entries": entries, "total": sum(e["amount"] for e in entries)})


def query_redelegations(state: State, arg: str, data: bytes) -> QueryResult:
    """A delegator's redelegations not yet matured."""
    delegator = decode_address(arg)
    entries = [
        {"src_validator": encode_address(e.src_validator), "dst_validator": encode_address(e.dst_validator),
         "balance": e.balance, "initial_balance": e.initial_balance, "creation_height": e.creation_height,
         "maturity_height": e.maturity_height}
        for e in redelegations_of(state, delegator)
    ]
    return QueryResult({"delegator": arg, "entries": entries})


STAKING_QUERIES = (
    QueryRoute("/validators", query_validators, "every validator: operator, consensus key, stake, power, commission"),
    QueryRoute("/validator", query_validator, "one validator: /validator/<operator address>"),
    QueryRoute("/delegations", query_delegations, "delegations of /delegations/<delegator address>"),
    QueryRoute("/validator_delegations", query_validator_delegations,
               "delegations to /validator_delegations/<operator address>"),
    QueryRoute("/unbonding", query_unbonding, "unbonding entries of /unbonding/<delegator address>"),
    QueryRoute("/redelegations", query_redelegations, "redelegations of /redelegations/<delegator address>"),
)
