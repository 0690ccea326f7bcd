"""staking `MsgEditValidator`: the operator changes its validator's commission rate, moniker or details.

The rate stays within `max_rate` (fixed at creation), changes by at most `max_change_rate`, and at most once
per `commission_change_blocks`, counted from the last change (or the creation), so delegators see a change
coming and have time to leave.
"""

import dataclasses

from ..block import BlockContext, Event
from ..crypto import encode_address
from ..proto.staking_pb2 import MsgEditValidator
from ..state import State
from ..validators import BPS, CommissionAboveMax, CommissionChangeTooLarge, CommissionChangeTooSoon
from ..validators import InvalidCommission, Validator, ValidatorNotFound, get_validator, save_validator
from ..validators import staking_params
from .create_validator import validate_details, validate_moniker


def validate_edit_validator(msg: MsgEditValidator) -> None:
    if msg.HasField("commission_rate") and msg.commission_rate > BPS:
        raise InvalidCommission(f"commission rate {msg.commission_rate} exceeds {BPS} basis points (100%)")
    if msg.moniker:
        validate_moniker(msg.moniker)
    if msg.HasField("details"):
        validate_details(msg.details)


def new_commission_rate(state: State, validator: Validator, rate: int, height: int) -> int:
    commission = validator.commission
    if rate > commission.max_rate:
        raise CommissionAboveMax(f"commission rate {rate} exceeds the validator's max_rate {commission.max_rate}")
    if abs(rate - commission.rate) > commission.max_change_rate:
        raise CommissionChangeTooLarge(
            f"commission may change by at most {commission.max_change_rate} basis points, "
            f"asked {commission.rate} -> {rate}"
        )
    wait = staking_params(state).commission_change_blocks
    if height < validator.commission_update_height + wait:
        raise CommissionChangeTooSoon(
            f"commission changed at height {validator.commission_update_height}; the next change is allowed "
            f"from height {validator.commission_update_height + wait}"
        )
    return rate


def process_edit_validator(state: State, ctx: BlockContext, signer: bytes, msg: MsgEditValidator) -> None:
    validator = get_validator(state, signer)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator")
    height = ctx.env.height
    if msg.HasField("commission_rate") and msg.commission_rate != validator.commission.rate:
        rate = new_commission_rate(state, validator, msg.commission_rate, height)
        validator = dataclasses.replace(validator, commission=dataclasses.replace(validator.commission, rate=rate),
                                        commission_update_height=height)
    if msg.moniker:
        validator = dataclasses.replace(validator, moniker=msg.moniker)
    if msg.HasField("details"):
        validator = dataclasses.replace(validator, details=msg.details)
    validator = save_validator(state, validator)
    ctx.emit(Event.of("edit_validator", operator=encode_address(signer), moniker=validator.moniker,
                      commission_rate=validator.commission.rate))
