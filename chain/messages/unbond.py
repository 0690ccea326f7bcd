"""staking `MsgUnbond`: take stake out of the signer's self-delegation (MsgUndelegate to its own validator).

Power drops in the same block; the tokens move from the bonded pool to the unbonding pool and come back to
the operator in the end-block of height `current + unbonding_blocks`. Until then they can still be slashed for
misbehavior committed while they were bonded. A jailed validator may unbond.
"""

from ..accounts import check_amount
from ..block import BlockContext, Event
from ..crypto import encode_address
from ..delegating import undelegate
from ..proto.staking_pb2 import MsgUnbond
from ..state import State
from ..validators import InsufficientStake, ValidatorNotFound, get_validator, validator_self_bond


def validate_unbond(msg: MsgUnbond) -> None:
    check_amount(msg.amount)


def process_unbond(state: State, ctx: BlockContext, signer: bytes, msg: MsgUnbond) -> None:
    validator = get_validator(state, signer)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator")
    own = validator_self_bond(state, validator)
    if msg.amount > own:
        raise InsufficientStake(
            f"cannot unbond {msg.amount}utrl, the operator's own stake (its self-bond) is {own}utrl"
        )
    entry = undelegate(state, ctx, signer, signer, msg.amount)
    validator = get_validator(state, signer)
    ctx.emit(
        Event.of(
            "unbond",
            operator=encode_address(signer),
            amount=entry.amount,
            stake=validator.stake,
            power=validator.power,
            maturity_height=entry.maturity_height,
        )
    )
