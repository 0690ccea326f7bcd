"""staking `MsgBond`: add tokens from the signer's balance to the signer's own validator (a self-delegation)."""

from ..accounts import check_amount
from ..block import BlockContext, Event
from ..crypto import encode_address
from ..delegating import delegate
from ..proto.staking_pb2 import MsgBond
from ..state import State
from ..validators import ValidatorNotFound, get_validator


def validate_bond(msg: MsgBond) -> None:
    check_amount(msg.amount)


def process_bond(state: State, ctx: BlockContext, signer: bytes, msg: MsgBond) -> None:
    if get_validator(state, signer) is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator; send MsgCreateValidator first")
    validator = delegate(state, ctx, signer, signer, msg.amount)
    operator = encode_address(signer)
    ctx.emit(Event.of("bond", operator=operator, amount=msg.amount, stake=validator.stake, power=validator.power))
