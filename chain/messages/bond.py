"""staking `MsgBond`: add tokens from the signer's balance to the signer's own validator.

A validator jailed for downtime may bond (its power stays 0 until MsgUnjail): that is how an operator whose
slashed stake fell below the minimum self-stake gets back to it. A tombstoned one (double-signed) may not.
"""

import dataclasses

from ..accounts import check_amount, move_funds
from ..block import BlockContext, Event
from ..codec import U64_MAX
from ..crypto import encode_address
from ..errors import InvalidAmount
from ..proto.staking_pb2 import MsgBond
from ..signing_info import get_signing_info
from ..state import State
from ..validators import BONDED_POOL, ValidatorJailed, ValidatorNotFound, get_validator, save_validator


def validate_bond(msg: MsgBond) -> None:
    check_amount(msg.amount)


def process_bond(state: State, ctx: BlockContext, signer: bytes, msg: MsgBond) -> None:
    validator = get_validator(state, signer)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator; send MsgCreateValidator first")
    info = get_signing_info(state, validator.consensus_address)
    if validator.jailed and info is not None and info.tombstoned:
        raise ValidatorJailed(f"validator {validator.moniker!r} is tombstoned for double-signing; it can only unbond")
    if validator.stake + msg.amount > U64_MAX:
        raise InvalidAmount("stake would exceed 64 bits")
    move_funds(state, signer, BONDED_POOL, msg.amount)
    validator = save_validator(state, dataclasses.replace(validator, stake=validator.stake + msg.amount))
    operator = encode_address(signer)
    ctx.emit(Event.of("bond", operator=operator, amount=msg.amount, stake=validator.stake, power=validator.power))
