"""bank `MsgSend`: move utrl from the signer to another account."""

from ..accounts import check_amount, move_funds
from ..block import BlockContext, Event
from ..crypto import ADDRESS_LENGTH, encode_address, is_module_address
from ..errors import InvalidAddress, Unauthorized
from ..proto.bank_pb2 import MsgSend
from ..state import State


def validate_send(msg: MsgSend) -> None:
    if len(msg.to) != ADDRESS_LENGTH:
        raise InvalidAddress(f"recipient must be a {ADDRESS_LENGTH}-byte address, got {len(msg.to)} bytes")
    check_amount(msg.amount)


def process_send(state: State, ctx: BlockContext, signer: bytes, msg: MsgSend) -> None:
    recipient = msg.to  # read once: each protobuf field read makes a new bytes object
    if is_module_address(recipient):
        raise Unauthorized(f"{encode_address(recipient)} is a module account and cannot receive transfers")
    move_funds(state, signer, recipient, msg.amount)
    if ctx.record_events:  # skipped on the CheckTx path, where nothing reads events; built as Event.of would
        ctx.emit(Event("transfer", (("sender", encode_address(signer)), ("recipient", encode_address(recipient)),
                                    ("amount", str(msg.amount)))))
