"""slashing `MsgUnjail`: the operator takes its validator out of jail, back into the active set.

Refused, each with its own code, when the signer operates no validator, its validator is not jailed, it was
tombstoned for double-signing (jailed for good), its jail time for downtime has not passed (`jailed_until`,
a height), or its operator's self-bond is below the minimum self-stake, or its whole stake below one unit of
power (it would have no power: the operator bonds more first, MsgBond, which a jailed validator accepts). An
unjailed validator starts a fresh liveness window: it is judged again only once it has been in the set for a
whole window.
"""

import dataclasses

from ..block import BlockContext, Event
from ..crypto import encode_address
from ..proto.slashing_pb2 import MsgUnjail
from ..signing_info import JailTimeRemains, SelfStakeTooLowToUnjail, SigningInfo, ValidatorNotJailed
from ..signing_info import ValidatorTombstoned, fresh_window, get_signing_info, save_signing_info
from ..state import State
from ..validators import ValidatorNotFound, get_validator, save_validator, staking_params, validator_self_bond


def validate_unjail(msg: MsgUnjail) -> None:
    """MsgUnjail has no fields: the signer names the validator."""


def process_unjail(state: State, ctx: BlockContext, signer: bytes, msg: MsgUnjail) -> None:
    validator = get_validator(state, signer)
    if validator is None:
        raise ValidatorNotFound(f"{encode_address(signer)} operates no validator")
    if not validator.jailed:
        raise ValidatorNotJailed(f"validator {validator.moniker!r} is not jailed")
    height = ctx.env.height
    info = get_signing_info(state, validator.consensus_address) or SigningInfo(validator.consensus_address, height)
    if info.tombstoned:
        raise ValidatorTombstoned(f"validator {validator.moniker!r} double-signed: it is jailed for good")
    if height < info.jailed_until:
        raise JailTimeRemains(f"validator {validator.moniker!r} is jailed until height {info.jailed_until}, "
                              f"{info.jailed_until - height} blocks from now")
    params = staking_params(state)
    own = validator_self_bond(state, validator)
    if own < params.min_self_stake:
        raise SelfStakeTooLowToUnjail(f"validator {validator.moniker!r}'s operator has {own}utrl bonded to it, "
                                      f"below the minimum self-stake {params.min_self_stake}utrl")
    if validator.stake < params.power_reduction:
        raise SelfStakeTooLowToUnjail(f"validator {validator.moniker!r} has {validator.stake}utrl at stake, below "
                                      f"one unit of power ({params.power_reduction}utrl)")
    validator = save_validator(state, dataclasses.replace(validator, jailed=False))
    save_signing_info(state, fresh_window(state, info, height))
    ctx.emit(Event.of("unjail", operator=encode_address(signer), stake=validator.stake, power=validator.power))
