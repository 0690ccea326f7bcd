"""The tally: bonded stake behind each vote option, and what the anchor's rules decide from it.

Who votes with what follows the anchor (Cosmos SDK x/gov v1): every account votes with the stake it has bonded,
through each validator it is bonded to; a validator's operator votes, in addition, for the stake of every
delegator to that validator who did not vote; a delegator that votes overrides its validator's vote for its own
stake, whenever either voted. Only stake bonded to an active validator counts, as it is at the end of the
voting period, each delegation's shares valued in tokens then (`delegations.py`). All of it is exact integer
arithmetic in utrl.

The decision, in the anchor's order (ratios in basis points, compared without division):
1. no bonded stake: rejected, deposits refunded;
2. votes (abstain included) below `quorum_bps` of the bonded stake: rejected, burned if `burn_vote_quorum`;
3. everyone abstained: rejected, refunded;
4. no-with-veto more than `veto_threshold_bps` of all votes: vetoed, burned if `burn_vote_veto`;
5. yes more than `threshold_bps` of the non-abstaining votes: passed, refunded;
6. otherwise rejected, refunded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..delegations import delegations_to, tokens_of
from ..state import State
from ..validators import active_validators
from .params import GovParams
from .store import ABSTAIN, NO, NO_WITH_VETO, YES, Tally

BPS = 10_000


@dataclass(frozen=True)
class VotingStake:
    """`stake` utrl that `voter` has bonded to the validator operated by `validator`."""

    voter: bytes
    validator: bytes
    stake: int


def voting_stakes(state: State) -> list[VotingStake]:
    """Every bonded stake that votes: one entry per delegation to an active validator (the operator's self-bond
    among them) with the tokens its shares are worth now. Those round down, so the few utrl of each validator's
    stake no delegation's tokens reach are its operator's to vote with: the entries add up to exactly the stake
    bonded to active validators."""
    stakes = []
    for validator in active_validators(state):
        counted = 0
        for delegation in delegations_to(state, validator.operator):
            tokens = tokens_of(delegation.shares, validator.stake, validator.delegator_shares)
            counted += tokens
            stakes.append(VotingStake(delegation.delegator, validator.operator, tokens))
        if validator.stake > counted:
            stakes.append(VotingStake(validator.operator, validator.operator, validator.stake - counted))
    return stakes


def tally_votes(stakes: Iterable[VotingStake], votes: dict[bytes, int]) -> Tally:
    """Stake behind each option: each voter's own bonds at its own option; each voting validator's operator
    also for the bonds of every delegator to it that did not vote."""
    totals = {YES: 0, ABSTAIN: 0, NO: 0, NO_WITH_VETO: 0}
    inherited: dict[bytes, int] = {}  # validator -> stake of its delegators who did not vote themselves
    bonded = 0
    for entry in stakes:
        bonded += entry.stake
        option = votes.get(entry.voter)
        if option is not None:
            totals[option] += entry.stake
        else:
            inherited[entry.validator] = inherited.get(entry.validator, 0) + entry.stake
    for validator, stake in inherited.items():
        option = votes.get(validator)
        if option is not None:
            totals[option] += stake
    return Tally(yes=totals[YES], abstain=totals[ABSTAIN], no=totals[NO], no_with_veto=totals[NO_WITH_VETO],
                 total_bonded=bonded)


@dataclass(frozen=True)
class Decision:
    passed: bool
    burn_deposits: bool
    reason: str


def decide(tally: Tally, params: GovParams) -> Decision:
    """The anchor's decision (see the module docstring)."""
    voted = tally.voted
    if tally.total_bonded == 0:
        return Decision(False, False, "no bonded stake")
    if voted * BPS < params.quorum_bps * tally.total_bonded:
        return Decision(False, params.burn_vote_quorum == 1,
                        f"quorum not reached: {voted} of {tally.total_bonded} bonded utrl voted, "
                        f"{params.quorum_bps} bps needed")
    active = voted - tally.abstain
    if active == 0:
        return Decision(False, False, "every vote abstained")
    if tally.no_with_veto * BPS > params.veto_threshold_bps * voted:
        return Decision(False, params.burn_vote_veto == 1,
                        f"vetoed: {tally.no_with_veto} of {voted} voted utrl are no-with-veto, more than "
                        f"{params.veto_threshold_bps} bps")
    if tally.yes * BPS > params.threshold_bps * active:
        return Decision(True, False, f"passed: {tally.yes} of {active} non-abstaining utrl voted yes")
    return Decision(False, False, f"threshold not reached: {tally.yes} of {active} non-abstaining utrl voted yes, "
                                  f"more than {params.threshold_bps} bps needed")
