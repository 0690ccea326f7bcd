"""staking `MsgUnbond`: take stake out of the signer's validator.

Power drops in the same block; the tokens move from the bonded pool to the unbonding pool and come back to
the operator in the end-block of height `current + unbonding_blocks`. Until then they can still be slashed for
misbehavior committed while they were bonded. A jailed validator may unbond (that is how its operator
recovers what slashing left).
"""

import dataclasses

from ..accounts import check_amount, move_funds
from ..block import BlockContext, Event
from ..crypto import encode_address
from ..proto.staking_pb2 import MsgUnbond
from ..state import State
from ..validators import BONDED_POOL, UNBONDING_POOL, InsufficientStake, LastValidator, UnbondingEntry
from ..validators import ValidatorNotFound, active_validators, compute_power, get_validator, next_unbonding_sequence
from ..validators import save_validator, set_unbonding_entry, staking_params


def validate_unbond(msg: MsgUnbond) -> None:
    check_amount(msg.amount)


def process_unbond(state: State, ctx: BlockContext, signer: bytes, msg: MsgUnbond) -> None:
    validator = get_validator(state, signer)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator")
    if msg.amount > validator.stake:
        raise InsufficientStake(f"cannot unbond {msg.amount}utrl, the validator's stake is {validator.stake}utrl")
    params = staking_params(state)
    remaining = validator.stake - msg.amount
    if validator.power > 0 and compute_power(remaining, validator.jailed, params) == 0:
        # CometBFT stops the chain when a block's updates empty the validator set: refuse the last exit.
        if [v.operator for v in active_validators(state)] == [signer]:
            raise LastValidator("this is the last active validator; its power cannot drop to zero")
    move_funds(state, BONDED_POOL, UNBONDING_POOL, msg.amount)
    validator = save_validator(state, dataclasses.replace(validator, stake=remaining))
    maturity = ctx.env.height + params.unbonding_blocks
    entry = UnbondingEntry(signer, msg.amount, ctx.env.height, maturity, next_unbonding_sequence(state))
    set_unbonding_entry(state, entry)
    ctx.emit(
        Event.of(
            "unbond",
            operator=encode_address(signer),
            amount=msg.amount,
            stake=validator.stake,
            power=validator.power,
            maturity_height=maturity,
        )
    )
