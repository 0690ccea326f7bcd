"""staking `MsgBond`: add tokens from the signer's balance to the signer's own validator (a self-delegation).

A validator jailed for downtime may bond (its power stays 0 until MsgUnjail): that is how an operator whose
slashed stake fell below the minimum self-bond gets back to it. A tombstoned one (double-signed) may not: it
can never unjail, so a self-bond would only lock the operator's tokens for an unbonding period. Others may
still delegate to it (MsgDelegate), as in Cosmos SDK's x/staking.
"""

from ..accounts import check_amount
from ..block import BlockContext, Event
from ..crypto import encode_address
from ..delegating import delegate
from ..proto.staking_pb2 import MsgBond
from ..signing_info import get_signing_info
from ..state import State
from ..validators import ValidatorJailed, ValidatorNotFound, get_validator


def validate_bond(msg: MsgBond) -> None:
    check_amount(msg.amount)


def process_bond(state: State, ctx: BlockContext, signer: bytes, msg: MsgBond) -> None:
    validator = get_validator(state, signer)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator; send MsgCreateValidator first")
    info = get_signing_info(state, validator.consensus_address)
    if validator.jailed and info is not None and info.tombstoned:
        raise ValidatorJailed(f"validator {validator.moniker!r} is tombstoned for double-signing; it can only unbond")
    validator = delegate(state, ctx, signer, signer, msg.amount)
    operator = encode_address(signer)
    ctx.emit(Event.of("bond", operator=operator, amount=msg.amount, stake=validator.stake, power=validator.power))
