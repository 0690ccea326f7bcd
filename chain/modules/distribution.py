"""Fee distribution: at the end of every block, the fee collector's whole balance goes to the validators.

Each active validator's operator account receives `fees * power // total_power`. The few utrl that integer
division leaves over (fewer than the number of validators) go one each to the validators in order of
descending power, then ascending operator address, so the payout is exact and independent of the proposer.
With no active validator the fees stay in the collector until there is one. This runs after staking's
end-block hook (only governance's comes later), once staking has applied the block's power changes, so it pays
by the powers in force from the next block on, the same powers CometBFT is told about.
"""

from __future__ import annotations

from ..accounts import get_balance, move_funds
from ..ante import FEE_COLLECTOR
from ..block import BlockContext, Event
from ..crypto import encode_address
from ..module import Module
from ..state import State
from ..validators import Validator, active_validators


def split_by_power(amount: int, validators: list[Validator]) -> list[tuple[Validator, int]]:
    """Exact shares of `amount` by power; remainders one utrl each by (descending power, operator)."""
    total = sum(v.power for v in validators)
    shares = {v.operator: amount * v.power // total for v in validators}
    remainder = amount - sum(shares.values())
    for validator in sorted(validators, key=lambda v: (-v.power, v.operator))[:remainder]:
        shares[validator.operator] += 1
    return [(v, shares[v.operator]) for v in validators]


def distribute_fees(state: State, ctx: BlockContext) -> None:
    fees = get_balance(state, FEE_COLLECTOR)
    if fees == 0:
        return
    validators = active_validators(state)
    if not validators:
        ctx.emit(Event.of("distribution_deferred", amount=fees, reason="no active validators"))
        return
    for validator, share in split_by_power(fees, validators):
        if share:
            move_funds(state, FEE_COLLECTOR, validator.operator, share)
            operator = encode_address(validator.operator)
            ctx.emit(Event.of("reward", operator=operator, amount=share, power=validator.power))
    ctx.emit(Event.of("distribution", amount=fees, validators=len(validators)))


DISTRIBUTION = Module(name="distribution", end_block=distribute_fees)
