"""The staking module: genesis validators, the unbonding and redelegation queues, power updates for CometBFT.

Messages live in `messages/create_validator.py`, `bond.py`, `unbond.py`, `delegate.py`, `undelegate.py`,
`redelegate.py` and `edit_validator.py`; the records and verbs they share in `validators.py`, `delegations.py`,
`unbonding.py` and `delegating.py`; queries in `staking_queries.py`, invariants in `staking_invariants.py`.
At the end of every block this module pays out matured unbonding entries and drops matured redelegation entries
(reading only the entries due, as their keys sort by maturity height), then reports to CometBFT each validator
whose power changed during the block, comparing with the power last sent so that nothing unchanged is re-sent.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses

from ..accounts import check_amount, move_funds
from ..block import BlockContext, Event
from ..crypto import decode_address, encode_address
from ..errors import InvalidRequest
from ..messages.bond import process_bond, validate_bond
from ..messages.create_validator import create_validator, process_create_validator, validate_create_validator
from ..messages.create_validator import validate_details, validate_moniker
from ..messages.delegate import process_delegate, validate_delegate
from ..messages.edit_validator import process_edit_validator, validate_edit_validator
from ..messages.redelegate import process_redelegate, validate_redelegate
from ..messages.unbond import process_unbond, validate_unbond
from ..messages.undelegate import process_undelegate, validate_undelegate
from ..module import MessageRoute, Module
from ..proto.staking_pb2 import MsgBond, MsgCreateValidator, MsgDelegate, MsgEditValidator, MsgRedelegate
from ..proto.staking_pb2 import MsgUnbond, MsgUndelegate
from ..state import State
from ..unbonding import delete_redelegation_entry, redelegations_due, set_unbonding_entry, unbonding_entries_due
from ..validators import UNBONDING_POOL, StakingParams, changed_operators, clear_power_changed, get_last_power
from ..validators import get_validator, set_last_power
from .bank import parse_genesis_amount
from .staking_invariants import STAKING_INVARIANTS
from .staking_queries import STAKING_QUERIES

GENESIS_VALIDATOR_FIELDS = {"operator", "pub_key", "stake", "moniker", "commission_rate", "max_rate",
                            "max_change_rate", "details"}
COMMISSION_FIELDS = ("commission_rate", "max_rate", "max_change_rate")


# -- genesis ----------------------------------------------------------------------------------------------------
def genesis_validator_message(index: int, entry: dict) -> MsgCreateValidator:
    """`entry` of `app_state["validators"]` as the MsgCreateValidator it stands for; raises InvalidRequest."""
    if not isinstance(entry, dict):
        raise InvalidRequest(f"genesis validator {index} must be an object")
    unknown = sorted(set(entry) - GENESIS_VALIDATOR_FIELDS)
    if unknown:
        raise InvalidRequest(f"genesis validator {index}: unknown fields {', '.join(unknown)}")
    try:
        pubkey = base64.b64decode(entry.get("pub_key", ""), validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise InvalidRequest(f"genesis validator {index}: pub_key must be base64") from None
    texts = {name: entry.get(name, default) for name, default in
             (("moniker", f"validator-{index}"), ("details", ""))}
    for name, value in texts.items():
        if not isinstance(value, str):
            raise InvalidRequest(f"genesis validator {index}: {name} must be a string")
    validate_moniker(texts["moniker"])
    validate_details(texts["details"])
    stake = parse_genesis_amount(entry.get("stake", 0))
    check_amount(stake, f"genesis validator {index} stake")
    commission = {}
    for name in COMMISSION_FIELDS:
        if name in entry:
            value = entry[name]
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**32:
                raise InvalidRequest(f"genesis validator {index}: {name} must be an integer of basis points")
            commission[name] = value
    message = MsgCreateValidator(consensus_pubkey=pubkey, stake=stake, **texts, **commission)
    validate_create_validator(message)
    return message


def init_staking_genesis(state: State, ctx: BlockContext, app_state: dict) -> None:
    """Create `app_state["validators"]`: [{"operator": "trolly1...", "pub_key": base64, "stake": n, "moniker": s,
    optional "commission_rate", "max_rate", "max_change_rate" (basis points) and "details"}].

    Each stake comes out of its operator's genesis balance (bank genesis runs first) as its self-delegation.
    The initial set goes to CometBFT through `ctx.update_validator`, which `init_chain` returns.
    """
    entries = app_state.get("validators", [])
    if not isinstance(entries, list):
        raise InvalidRequest("genesis validators must be a list")
    for index, entry in enumerate(entries):
        message = genesis_validator_message(index, entry)
        create_validator(state, ctx, decode_address(entry.get("operator", "")), message)
    report_power_changes(state, ctx)


# -- end-block --------------------------------------------------------------------------------------------------
def complete_matured_unbonding(state: State, ctx: BlockContext) -> None:
    """Return every unbonding entry due at this height to its delegator."""
    for entry in unbonding_entries_due(state, ctx.env.height):
        move_funds(state, UNBONDING_POOL, entry.delegator, entry.amount)
        set_unbonding_entry(state, dataclasses.replace(entry, amount=0))
        ctx.emit(Event.of("unbonding_complete", delegator=encode_address(entry.delegator),
                          validator=encode_address(entry.operator), amount=entry.amount))


def complete_matured_redelegations(state: State, ctx: BlockContext) -> None:
    """Redelegations due at this height are no longer slashable for their source's past: drop their entries."""
    for entry in redelegations_due(state, ctx.env.height):
        delete_redelegation_entry(state, entry)


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
    complete_matured_redelegations(state, ctx)
    report_power_changes(state, ctx)


STAKING = Module(
    name="staking",
    messages=(
        MessageRoute(MsgCreateValidator, validate_create_validator, process_create_validator),
        MessageRoute(MsgBond, validate_bond, process_bond),
        MessageRoute(MsgUnbond, validate_unbond, process_unbond),
        MessageRoute(MsgDelegate, validate_delegate, process_delegate),
        MessageRoute(MsgUndelegate, validate_undelegate, process_undelegate),
        MessageRoute(MsgRedelegate, validate_redelegate, process_redelegate),
        MessageRoute(MsgEditValidator, validate_edit_validator, process_edit_validator),
    ),
    queries=STAKING_QUERIES,
    params=(StakingParams,),
    init_genesis=init_staking_genesis,
    end_block=end_block_staking,
    invariants=STAKING_INVARIANTS,
)
