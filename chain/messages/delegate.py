"""staking `MsgDelegate`: bond tokens of the signer's balance to a validator, as a delegation."""

from ..accounts import check_amount
from ..block import BlockContext
from ..crypto import ADDRESS_LENGTH
from ..delegating import delegate
from ..proto.staking_pb2 import MsgDelegate
from ..state import State
from ..validators import InvalidValidatorAddress


def check_validator_address(address: bytes, what: str = "validator") -> None:
    if len(address) != ADDRESS_LENGTH:
        raise InvalidValidatorAddress(f"{what} must be a {ADDRESS_LENGTH}-byte address, got {len(address)} bytes")


def validate_delegate(msg: MsgDelegate) -> None:
    check_validator_address(msg.validator)
    check_amount(msg.amount)


def process_delegate(state: State, ctx: BlockContext, signer: bytes, msg: MsgDelegate) -> None:
    delegate(state, ctx, signer, msg.validator, msg.amount)
