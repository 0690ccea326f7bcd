"""staking `MsgRedelegate`: move part of the signer's delegation from one validator to another, at once.

The moved stake stays slashable for the source's faults committed before the move until the redelegation
matures (`unbonding_blocks`); stake that arrived at the source by a redelegation not yet matured cannot move
again (no transitive redelegation), as in the anchor.
"""

from ..accounts import check_amount
from ..block import BlockContext
from ..delegating import redelegate
from ..proto.staking_pb2 import MsgRedelegate
from ..state import State
from ..validators import SelfRedelegation
from .delegate import check_validator_address


def validate_redelegate(msg: MsgRedelegate) -> None:
    check_validator_address(msg.src_validator, "src_validator")
    check_validator_address(msg.dst_validator, "dst_validator")
    if msg.src_validator == msg.dst_validator:
        raise SelfRedelegation("src_validator and dst_validator are the same validator")
    check_amount(msg.amount)


def process_redelegate(state: State, ctx: BlockContext, signer: bytes, msg: MsgRedelegate) -> None:
    redelegate(state, ctx, signer, msg.src_validator, msg.dst_validator, msg.amount)
