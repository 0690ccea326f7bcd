"""Governance parameters (genesis section "gov"), with the anchor's defaults (Cosmos SDK x/gov v1).

Periods are in blocks (the state machine has no clock); every ratio is in basis points (1/10,000) and compared
with exact integer arithmetic. The three burn switches are 0 or 1, as the anchor's booleans."""

from __future__ import annotations

import dataclasses

from ..errors import InvalidRequest


@dataclasses.dataclass(frozen=True)
class GovParams:
    SECTION = "gov"

    min_deposit: int = 10_000_000
    """utrl a proposal's deposits must reach for its voting period to start (the anchor's 10,000,000 of the
    staking denomination)."""

    max_deposit_blocks: int = 172_800
    """Blocks a proposal may wait for `min_deposit` (the anchor's two days, in 1-second blocks). When they pass
    short of it, the proposal is deleted and its deposits refunded (burned with `burn_proposal_deposit_prevote`)."""

    voting_period_blocks: int = 172_800
    """Blocks from the start of a proposal's voting period to its tally (the anchor's two days)."""

    quorum_bps: int = 3_340
    """Share of the total bonded stake that must vote (abstain included) for the tally to count."""

    threshold_bps: int = 5_000
    """A proposal passes when its yes votes are more than this share of the non-abstaining votes."""

    veto_threshold_bps: int = 3_340
    """A proposal is vetoed when its no-with-veto votes are more than this share of all votes (abstain
    included): it fails, and its deposits are burned while `burn_vote_veto` is 1."""

    min_initial_deposit_bps: int = 0
    """Share of `min_deposit` the submitter must deposit with the proposal itself (the anchor's
    min_initial_deposit_ratio, 0 by default)."""

    burn_vote_quorum: int = 0
    """1: burn the deposits of a proposal whose vote missed the quorum; 0: refund them (the anchor's default)."""

    burn_proposal_deposit_prevote: int = 0
    """1: burn the deposits of a proposal that never reached `min_deposit`; 0: refund them (the anchor's
    default since v0.47)."""

    burn_vote_veto: int = 1
    """1: burn the deposits of a vetoed proposal (the anchor's default); 0: refund them."""

    def __post_init__(self) -> None:
        if self.max_deposit_blocks < 1 or self.voting_period_blocks < 1:
            raise InvalidRequest("gov.max_deposit_blocks and gov.voting_period_blocks must be at least one block")
        if self.min_deposit < 1:
            raise InvalidRequest("gov.min_deposit must be at least 1utrl, or any account could start a vote for free")
        for name in ("quorum_bps", "min_initial_deposit_bps"):
            if not 0 <= getattr(self, name) <= 10_000:
                raise InvalidRequest(f"gov.{name} must be within 0..10000 basis points")
        if not 1 <= self.veto_threshold_bps <= 10_000:
            raise InvalidRequest("gov.veto_threshold_bps must be within 1..10000 basis points (positive, as in the anchor)")
        if not 1 <= self.threshold_bps <= 9_999:
            raise InvalidRequest("gov.threshold_bps must be within 1..9999 basis points: positive, as in the anchor, "
                                 "and below 10000, where no proposal could pass again, not even one restoring it")
        for name in ("burn_vote_quorum", "burn_proposal_deposit_prevote", "burn_vote_veto"):
            if getattr(self, name) not in (0, 1):
                raise InvalidRequest(f"gov.{name} must be 0 or 1")

    def min_initial_deposit(self) -> int:
        """The smallest deposit a proposal may be submitted with: `min_initial_deposit_bps` of `min_deposit`,
        rounded up."""
        return -(-self.min_deposit * self.min_initial_deposit_bps // 10_000)

    @classmethod
    def localnet(cls) -> "GovParams":
        """Short periods and a small deposit, so a developer sees a proposal decided within a minute."""
        return cls(min_deposit=1_000_000, max_deposit_blocks=30, voting_period_blocks=30)
