"""Errors of governance (codespace "gov"); every one leaves state unchanged.

Clients match on the codes, so they are stable. They take the block 120..139, apart from every other module's,
so that a code alone names its condition."""

from __future__ import annotations

from ..errors import ChainError


class GovError(ChainError):
    """A governance message was refused."""

    code = 120
    codespace = "gov"


class ProposalNotFound(GovError):
    """No proposal has this id (it never existed, or it was deleted when its deposit period ended)."""

    code = 121


class UnknownParam(GovError):
    """A change names a params section or a key that the chain does not have."""

    code = 122


class InvalidParamValue(GovError):
    """A change's value is not an integer, or is outside its param's range."""

    code = 123


class ParamRuleBroken(GovError):
    """The params as they would be after every change of the proposal break a rule that ties params together."""

    code = 124


class ParamNotGovernable(GovError):
    """This param is fixed at genesis: changing it by proposal would leave stored records inconsistent."""

    code = 125


class NotInVotingPeriod(GovError):
    """The proposal is not in its voting period (still collecting deposits, or already decided)."""

    code = 126


class ProposalClosed(GovError):
    """The proposal was already decided: it takes no more deposits."""

    code = 127


class InvalidVoteOption(GovError):
    """The vote option is not yes, abstain, no or no-with-veto."""

    code = 128


class InvalidProposal(GovError):
    """The proposal's title, summary or list of changes is malformed."""

    code = 129


class InitialDepositTooLow(GovError):
    """The initial deposit is below gov.min_initial_deposit_bps of gov.min_deposit."""

    code = 130
