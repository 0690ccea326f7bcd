"""staking `MsgUndelegate`: start unbonding part of the signer's delegation to a validator.

The tokens leave the validator's stake at once and return to the signer `unbonding_blocks` later; until then a
fault the validator committed before the unbonding began can still take its share of them.
"""

from ..accounts import check_amount
from ..block import BlockContext
from ..delegating import undelegate
from ..proto.staking_pb2 import MsgUndelegate
from ..state import State
from .delegate import check_validator_address


def validate_undelegate(msg: MsgUndelegate) -> None:
    check_validator_address(msg.validator)
    check_amount(msg.amount)


def process_undelegate(state: State, ctx: BlockContext, signer: bytes, msg: MsgUndelegate) -> None:
    undelegate(state, ctx, signer, msg.validator, msg.amount)
