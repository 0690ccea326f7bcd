"""staking `MsgCreateValidator`: the signer becomes a validator operator, bonding its own tokens.

Self-bond only: a validator's stake is its operator's tokens (no delegation from other accounts yet).
One validator per operator, and a consensus key is bound to one validator for good.
"""

from ..accounts import check_amount, move_funds
from ..block import BlockContext, Event
from ..crypto import PUBKEY_LENGTH, encode_address
from ..proto.staking_pb2 import MsgCreateValidator
from ..state import State
from ..validators import BONDED_POOL, MAX_MONIKER_BYTES, BelowMinSelfStake, InvalidConsensusKey, InvalidMoniker
from ..validators import Validator, ValidatorExists, get_validator, register_consensus_key, save_validator
from ..validators import staking_params


def validate_moniker(moniker: str) -> None:
    try:
        size = len(moniker.encode())
    except UnicodeEncodeError:
        raise InvalidMoniker("moniker is not valid UTF-8 text") from None
    if not 1 <= size <= MAX_MONIKER_BYTES:
        raise InvalidMoniker(f"moniker must be 1..{MAX_MONIKER_BYTES} bytes of UTF-8, got {size}")
    # A fixed rule (C0, DEL, C1 control characters) rather than str.isprintable(), whose answer follows
    # the Unicode database of the running Python and could differ between validators.
    if any(ord(character) < 0x20 or 0x7F <= ord(character) <= 0x9F for character in moniker):
        raise InvalidMoniker("moniker must not contain control characters")


def validate_create_validator(msg: MsgCreateValidator) -> None:
    if len(msg.consensus_pubkey) != PUBKEY_LENGTH:
        raise InvalidConsensusKey(
            f"consensus_pubkey must be a {PUBKEY_LENGTH}-byte ed25519 key, got {len(msg.consensus_pubkey)} bytes"
        )
    check_amount(msg.stake, "stake")
    validate_moniker(msg.moniker)


def create_validator(
    state: State, ctx: BlockContext, operator: bytes, pubkey: bytes, stake: int, moniker: str
) -> Validator:
    """Shared by the message and by genesis: bond `stake` of `operator`'s balance into a new validator."""
    if get_validator(state, operator) is not None:
        raise ValidatorExists(f"{encode_address(operator)} already operates a validator; use MsgBond to add stake")
    params = staking_params(state)
    if stake < params.min_self_stake or stake < params.power_reduction:
        raise BelowMinSelfStake(
            f"stake {stake}utrl is below the minimum {max(params.min_self_stake, params.power_reduction)}utrl"
        )
    register_consensus_key(state, operator, pubkey)
    move_funds(state, operator, BONDED_POOL, stake)
    validator = save_validator(state, Validator(operator, pubkey, stake, 0, moniker))
    ctx.emit(
        Event.of(
            "create_validator",
            operator=encode_address(operator),
            consensus_address=validator.consensus_address.hex().upper(),
            stake=stake,
            power=validator.power,
            moniker=moniker,
        )
    )
    return validator


def process_create_validator(state: State, ctx: BlockContext, signer: bytes, msg: MsgCreateValidator) -> None:
    create_validator(state, ctx, signer, msg.consensus_pubkey, msg.stake, msg.moniker)
