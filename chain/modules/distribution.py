"""Fee distribution: at the end of every block, the fee collector's whole balance goes to the validators.

Each active validator's share is `fees * power // total_power`. The few utrl that integer division leaves over
(fewer than the number of validators) go one each to the validators in order of descending power, then
ascending operator address, so the payout is exact and independent of the proposer. Of a validator's share,
its commission (`share * commission_rate // 10000`) goes to its operator's account at once; the rest is
credited to its delegators in its current rewards period (`rewards.py`, F1), which each delegation withdraws
when it likes (MsgWithdrawRewards, or any change of its shares). That costs one record per validator whatever
the number of delegators. With no active validator the fees stay in the collector until there is one. This runs
after staking's end-block hook (only governance's comes later), once staking has applied the block's power
changes, so it pays by the powers in force from the next block on, the same powers CometBFT is told about.
"""

from __future__ import annotations

from ..accounts import get_balance, move_funds
from ..ante import FEE_COLLECTOR
from ..block import BlockContext, Event
from ..crypto import decode_address, encode_address
from ..delegations import delegations_of, delegations_to
from ..messages.withdraw_rewards import process_withdraw_rewards, validate_withdraw_rewards
from ..module import InvariantBroken, MessageRoute, Module, QueryResult, QueryRoute
from ..proto.distribution_pb2 import MsgWithdrawRewards
from ..rewards import DISTRIBUTION_POOL, community_pool, credit_rewards, outstanding, pending_rewards
from ..state import State
from ..validators import BPS, Validator, active_validators, get_validator, iterate_validators


def split_by_power(amount: int, validators: list[Validator]) -> list[tuple[Validator, int]]:
    """Exact shares of `amount` by power; remainders one utrl each by (descending power, operator)."""
    total = sum(v.power for v in validators)
    shares = {v.operator: amount * v.power // total for v in validators}
    remainder = amount - sum(shares.values())
    for validator in sorted(validators, key=lambda v: (-v.power, v.operator))[:remainder]:
        shares[validator.operator] += 1
    return [(v, shares[v.operator]) for v in validators]


def pay_validator(state: State, ctx: BlockContext, validator: Validator, share: int) -> None:
    """The operator's commission first, the rest to the delegators (the operator's self-bond among them)."""
    commission = share * validator.commission.rate // BPS
    if commission:
        move_funds(state, FEE_COLLECTOR, validator.operator, commission)
    credit_rewards(state, FEE_COLLECTOR, validator.operator, share - commission)
    ctx.emit(Event.of("reward", operator=encode_address(validator.operator), amount=share, power=validator.power,
                      commission=commission, delegators=share - commission))


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
            pay_validator(state, ctx, validator, share)
    ctx.emit(Event.of("distribution", amount=fees, validators=len(validators)))


# -- queries ----------------------------------------------------------------------------------------------------
def query_rewards(state: State, arg: str, data: bytes) -> QueryResult:
    """A delegator's pending rewards, per validator and in total."""
    delegator = decode_address(arg)
    rows = []
    for delegation in delegations_of(state, delegator):
        validator = get_validator(state, delegation.validator)
        assert validator is not None, "delegation to a missing validator"
        rows.append({"validator": encode_address(delegation.validator),
                     "amount": pending_rewards(state, delegation, validator.delegator_shares)})
    return QueryResult({"delegator": arg, "rewards": rows, "total": sum(row["amount"] for row in rows)})


def query_community_pool(state: State, arg: str, data: bytes) -> QueryResult:
    return QueryResult({"amount": community_pool(state)})


# -- invariants -------------------------------------------------------------------------------------------------
def check_distribution_pool(state: State) -> None:
    """The module account holds exactly every validator's outstanding rewards plus the community pool."""
    held = sum(outstanding(state, v.operator) for v in iterate_validators(state)) + community_pool(state)
    if get_balance(state, DISTRIBUTION_POOL) != held:
        raise InvariantBroken(f"distribution pool {get_balance(state, DISTRIBUTION_POOL)} != outstanding + pool {held}")


def check_rewards_cover_claims(state: State) -> None:
    """No validator's delegations can claim more than its outstanding rewards (no rounding leak)."""
    for validator in iterate_validators(state):
        claims = sum(pending_rewards(state, d, validator.delegator_shares)
                     for d in delegations_to(state, validator.operator))
        if claims > outstanding(state, validator.operator):
            raise InvariantBroken(f"validator {encode_address(validator.operator)}: claims {claims} exceed "
                                  f"outstanding {outstanding(state, validator.operator)}")


DISTRIBUTION = Module(
    name="distribution",
    messages=(MessageRoute(MsgWithdrawRewards, validate_withdraw_rewards, process_withdraw_rewards),),
    queries=(
        QueryRoute("/rewards", query_rewards, "pending rewards of /rewards/<delegator address>, per validator"),
        QueryRoute("/community_pool", query_community_pool, "rewards no delegation can claim (rounding dust)"),
    ),
    end_block=distribute_fees,
    invariants=(check_distribution_pool, check_rewards_cover_claims),
)
