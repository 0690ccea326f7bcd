"""staking `MsgCreateValidator`: the signer becomes a validator operator, self-bonding its own tokens.

The first stake is the operator's delegation to its own validator (`delegating.delegate`); others may delegate
to it afterwards. One validator per operator, and a consensus key is bound to one validator for good. Commission
terms unset in the message take `DEFAULT_COMMISSION`.
"""

from ..accounts import check_amount
from ..block import BlockContext, Event
from ..crypto import PUBKEY_LENGTH, encode_address
from ..delegating import delegate
from ..proto.staking_pb2 import MsgCreateValidator
from ..rewards import initialize_validator_rewards
from ..state import State
from ..validators import BPS, DEFAULT_COMMISSION, MAX_DETAILS_BYTES, MAX_MONIKER_BYTES, BelowMinSelfStake
from ..validators import Commission, InvalidCommission, InvalidConsensusKey, InvalidDetails, InvalidMoniker
from ..validators import Validator, ValidatorExists, get_validator, register_consensus_key, save_validator
from ..validators import staking_params


def has_control_characters(text: str) -> bool:
    # A fixed rule (C0, DEL, C1 control characters) rather than str.isprintable(), whose answer follows
    # the Unicode database of the running Python and could differ between validators.
    return any(ord(character) < 0x20 or 0x7F <= ord(character) <= 0x9F for character in text)


def validate_moniker(moniker: str) -> None:
    try:
        size = len(moniker.encode())
    except UnicodeEncodeError:
        raise InvalidMoniker("moniker is not valid UTF-8 text") from None
    if not 1 <= size <= MAX_MONIKER_BYTES:
        raise InvalidMoniker(f"moniker must be 1..{MAX_MONIKER_BYTES} bytes of UTF-8, got {size}")
    if has_control_characters(moniker):
        raise InvalidMoniker("moniker must not contain control characters")


def validate_details(details: str) -> None:
    try:
        size = len(details.encode())
    except UnicodeEncodeError:
        raise InvalidDetails("details are not valid UTF-8 text") from None
    if size > MAX_DETAILS_BYTES:
        raise InvalidDetails(f"details must be at most {MAX_DETAILS_BYTES} bytes of UTF-8, got {size}")
    if has_control_characters(details):
        raise InvalidDetails("details must not contain control characters")


def validate_commission(commission: Commission) -> None:
    if not commission.max_rate <= BPS:
        raise InvalidCommission(f"max_rate {commission.max_rate} exceeds {BPS} basis points (100%)")
    if commission.rate > commission.max_rate:
        raise InvalidCommission(f"commission rate {commission.rate} exceeds max_rate {commission.max_rate}")
    if commission.max_change_rate > commission.max_rate:
        raise InvalidCommission(
            f"max_change_rate {commission.max_change_rate} exceeds max_rate {commission.max_rate}"
        )


def commission_of(msg: MsgCreateValidator) -> Commission:
    """The message's terms, each unset one taken from DEFAULT_COMMISSION."""
    return Commission(
        rate=msg.commission_rate if msg.HasField("commission_rate") else DEFAULT_COMMISSION.rate,
        max_rate=msg.max_rate if msg.HasField("max_rate") else DEFAULT_COMMISSION.max_rate,
        max_change_rate=msg.max_change_rate if msg.HasField("max_change_rate") else DEFAULT_COMMISSION.max_change_rate,
    )


def validate_create_validator(msg: MsgCreateValidator) -> None:
    if len(msg.consensus_pubkey) != PUBKEY_LENGTH:
        raise InvalidConsensusKey(
            f"consensus_pubkey must be a {PUBKEY_LENGTH}-byte ed25519 key, got {len(msg.consensus_pubkey)} bytes"
        )
    check_amount(msg.stake, "stake")
    validate_moniker(msg.moniker)
    validate_details(msg.details)
    validate_commission(commission_of(msg))


def create_validator(state: State, ctx: BlockContext, operator: bytes, msg: MsgCreateValidator) -> Validator:
    """Shared by the message and by genesis: a new validator with `msg.stake` of `operator`'s balance self-bonded."""
    if get_validator(state, operator) is not None:
        raise ValidatorExists(f"{encode_address(operator)} already operates a validator; use MsgBond to add stake")
    params = staking_params(state)
    if msg.stake < params.min_self_stake or msg.stake < params.power_reduction:
        raise BelowMinSelfStake(
            f"stake {msg.stake}utrl is below the minimum {max(params.min_self_stake, params.power_reduction)}utrl"
        )
    register_consensus_key(state, operator, msg.consensus_pubkey)
    initialize_validator_rewards(state, operator)
    save_validator(state, Validator(operator, msg.consensus_pubkey, 0, 0, msg.moniker, commission=commission_of(msg),
                                    commission_update_height=ctx.env.height, details=msg.details))
    validator = delegate(state, ctx, operator, operator, msg.stake)
    ctx.emit(
        Event.of(
            "create_validator",
            operator=encode_address(operator),
            consensus_address=validator.consensus_address.hex().upper(),
            stake=msg.stake,
            power=validator.power,
            moniker=msg.moniker,
            commission_rate=validator.commission.rate,
        )
    )
    return validator


def process_create_validator(state: State, ctx: BlockContext, signer: bytes, msg: MsgCreateValidator) -> None:
    create_validator(state, ctx, signer, msg)
