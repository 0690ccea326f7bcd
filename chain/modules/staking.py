"""The staking module: genesis validators, the unbonding queue, power updates for CometBFT, queries, invariants.

Messages live in `messages/create_validator.py`, `bond.py` and `unbond.py`; the records and verbs they share
in `validators.py`. At the end of every block this module pays out matured unbonding entries (reading only
the entries due, as their keys sort by maturity height), then reports to CometBFT each validator whose power
changed during the block, comparing with the power last sent so that nothing unchanged is re-sent.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses

from .. import keys
from ..accounts import check_amount, get_balance, move_funds
from ..block import BlockContext, Event
from ..crypto import decode_address, encode_address
from ..errors import InvalidRequest, NotFound
from ..messages.bond import process_bond, validate_bond
from ..messages.create_validator import create_validator, process_create_validator, validate_create_validator
from ..messages.create_validator import validate_moniker
from ..messages.unbond import process_unbond, validate_unbond
from ..module import InvariantBroken, MessageRoute, Module, QueryResult, QueryRoute
from ..proto.staking_pb2 import MsgBond, MsgCreateValidator, MsgUnbond
from ..state import State
from ..validators import BONDED_POOL, UNBONDING_POOL, StakingParams, Validator, changed_operators
from ..validators import clear_power_changed, compute_power, get_last_power, get_validator
from ..validators import iterate_unbonding_entries, iterate_validators, set_last_power, set_unbonding_entry
from ..validators import staking_params, unbonding_entries_due, unbonding_entries_of
from .bank import parse_genesis_amount


# -- genesis ----------------------------------------------------------------------------------------------------
def init_staking_genesis(state: State, ctx: BlockContext, app_state: dict) -> None:
    """Create `app_state["validators"]`: [{"operator": "trolly1...", "pub_key": base64, "stake": n, "moniker": s}].

    Each stake comes out of its operator's genesis balance (bank genesis runs first). The initial set goes
    to CometBFT through `ctx.update_validator`, which `init_chain` returns.
    """
    entries = app_state.get("validators", [])
    if not isinstance(entries, list):
        raise InvalidRequest("genesis validators must be a list")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InvalidRequest(f"genesis validator {index} must be an object")
        unknown = sorted(set(entry) - {"operator", "pub_key", "stake", "moniker"})
        if unknown:
            raise InvalidRequest(f"genesis validator {index}: unknown fields {', '.join(unknown)}")
        try:
            pubkey = base64.b64decode(entry.get("pub_key", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise InvalidRequest(f"genesis validator {index}: pub_key must be base64") from None
        moniker = entry.get("moniker", f"validator-{index}")
        if not isinstance(moniker, str):
            raise InvalidRequest(f"genesis validator {index}: moniker must be a string")
        validate_moniker(moniker)
        stake = parse_genesis_amount(entry.get("stake", 0))
        check_amount(stake, f"genesis validator {index} stake")
        message = MsgCreateValidator(consensus_pubkey=pubkey, stake=stake, moniker=moniker)
        validate_create_validator(message)
        operator = decode_address(entry.get("operator", ""))
        create_validator(state, ctx, operator, message.consensus_pubkey, message.stake, message.moniker)
    report_power_changes(state, ctx)


# -- end-block --------------------------------------------------------------------------------------------------
def complete_matured_unbonding(state: State, ctx: BlockContext) -> None:
    """Return every unbonding entry due at this height to its operator."""
    for entry in unbonding_entries_due(state, ctx.env.height):
        move_funds(state, UNBONDING_POOL, entry.operator, entry.amount)
        set_unbonding_entry(state, dataclasses.replace(entry, amount=0))
        ctx.emit(Event.of("unbonding_complete", operator=encode_address(entry.operator), amount=entry.amount))


def report_power_changes(state: State, ctx: BlockContext) -> None:
    """Send CometBFT the validators whose power differs from what it last received (0 removes one)."""
    for operator in changed_operators(state):
        clear_power_changed(state, operator)
        validator = get_validator(state, operator)
        assert validator is not None, "power-changed mark for a missing validator"
        if validator.power == get_last_power(state, operator):
            continue  # changed and changed back within the block
        ctx.update_validator(validator.consensus_pubkey, validator.power)
        set_last_power(state, operator, validator.power)
        ctx.emit(Event.of("validator_power", operator=encode_address(operator), power=validator.power))


def end_block_staking(state: State, ctx: BlockContext) -> None:
    complete_matured_unbonding(state, ctx)
    report_power_changes(state, ctx)


# -- queries ----------------------------------------------------------------------------------------------------
def validator_json(validator: Validator) -> dict:
    return {
        "operator": encode_address(validator.operator),
        "consensus_pubkey": base64.b64encode(validator.consensus_pubkey).decode(),
        "consensus_address": validator.consensus_address.hex().upper(),
        "stake": validator.stake,
        "power": validator.power,
        "moniker": validator.moniker,
        "jailed": validator.jailed,
    }


def query_validators(state: State, arg: str, data: bytes) -> QueryResult:
    if arg:
        raise InvalidRequest("/validators takes no argument; use /validator/<operator>")
    return QueryResult([validator_json(v) for v in iterate_validators(state)])


def query_validator(state: State, arg: str, data: bytes) -> QueryResult:
    operator = decode_address(arg)
    validator = get_validator(state, operator)
    if validator is None:
        raise NotFound(f"{arg} operates no validator")
    return QueryResult(validator_json(validator), proof_key=keys.validator_key(operator))


def query_unbonding(state: State, arg: str, data: bytes) -> QueryResult:
    operator = decode_address(arg)
    entries = [
        {"amount": e.amount, "creation_height": e.creation_height, "maturity_height": e.maturity_height}
        for e in unbonding_entries_of(state, operator)
    ]
    return QueryResult({"operator": arg, "entries": entries, "total": sum(e["amount"] for e in entries)})


# -- invariants -------------------------------------------------------------------------------------------------
def check_bonded_pool(state: State) -> None:
    """The bonded pool holds exactly the validators' stakes."""
    staked = sum(v.stake for v in iterate_validators(state))
    if get_balance(state, BONDED_POOL) != staked:
        raise InvariantBroken(f"bonded pool {get_balance(state, BONDED_POOL)} != sum of stakes {staked}")


def check_unbonding_pool(state: State) -> None:
    """The unbonding pool holds exactly the unbonding entries, and the per-operator index matches them."""
    entries = list(iterate_unbonding_entries(state))
    total = sum(e.amount for e in entries)
    if get_balance(state, UNBONDING_POOL) != total:
        raise InvariantBroken(f"unbonding pool {get_balance(state, UNBONDING_POOL)} != sum of entries {total}")
    indexed = sum(1 for _ in state.iterate(keys.UNBONDING_BY_OPERATOR))
    if indexed != len(entries) or any(e.amount == 0 for e in entries):
        raise InvariantBroken(f"unbonding index holds {indexed} keys for {len(entries)} entries (or an empty entry)")


def check_validator_power(state: State) -> None:
    """power == stake // power_reduction (0 when jailed or below min stake); the indexes agree with it."""
    params = staking_params(state)
    active = {key[len(keys.ACTIVE_VALIDATOR):] for key, _ in state.iterate(keys.ACTIVE_VALIDATOR)}
    pending = {key[len(keys.VALIDATOR_POWER_CHANGED):] for key, _ in state.iterate(keys.VALIDATOR_POWER_CHANGED)}
    count = 0
    for validator in iterate_validators(state):
        name = encode_address(validator.operator)
        if validator.power != compute_power(validator.stake, validator.jailed, params):
            raise InvariantBroken(f"validator {name}: power {validator.power} does not match stake {validator.stake}")
        if (validator.power > 0) != (validator.operator in active):
            raise InvariantBroken(f"validator {name}: active index disagrees with power {validator.power}")
        if validator.operator not in pending and get_last_power(state, validator.operator) != validator.power:
            raise InvariantBroken(f"validator {name}: power {validator.power} was never reported to CometBFT")
        if state.get(keys.validator_by_cons_key(validator.consensus_address)) != validator.operator:
            raise InvariantBroken(f"validator {name}: consensus address index does not point back to it")
        count += validator.power > 0
    if count != len(active) or count > params.max_validators:
        raise InvariantBroken(
            f"{len(active)} active index keys, {count} validators with power, max {params.max_validators}"
        )


STAKING = Module(
    name="staking",
    messages=(
        MessageRoute(MsgCreateValidator, validate_create_validator, process_create_validator),
        MessageRoute(MsgBond, validate_bond, process_bond),
        MessageRoute(MsgUnbond, validate_unbond, process_unbond),
    ),
    queries=(
        QueryRoute("/validators", query_validators, "every validator: operator, consensus key, stake, power, jailed"),
        QueryRoute("/validator", query_validator, "one validator: /validator/<operator address>"),
        QueryRoute("/unbonding", query_unbonding, "unbonding entries of /unbonding/<operator address>"),
    ),
    params=(StakingParams,),
    init_genesis=init_staking_genesis,
    end_block=end_block_staking,
    invariants=(check_bonded_pool, check_unbonding_pool, check_validator_power),
)
