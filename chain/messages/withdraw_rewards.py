"""distribution `MsgWithdrawRewards`: pay the signer the fee rewards its delegation to a validator earned."""

from ..block import BlockContext
from ..delegating import withdraw_delegation_rewards
from ..proto.distribution_pb2 import MsgWithdrawRewards
from ..state import State
from .delegate import check_validator_address


def validate_withdraw_rewards(msg: MsgWithdrawRewards) -> None:
    check_validator_address(msg.validator)


def process_withdraw_rewards(state: State, ctx: BlockContext, signer: bytes, msg: MsgWithdrawRewards) -> None:
    withdraw_delegation_rewards(state, ctx, signer, msg.validator)
