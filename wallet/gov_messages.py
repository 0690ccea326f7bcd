"""Building governance messages from what a person types: `section.key=value` changes, vote option names.

The chain checks everything again (`trolly.chain.gov`); these checks only turn a typo into a clear error before
anything is signed."""

from __future__ import annotations

from trolly.chain.gov.store import OPTION_NAMES
from trolly.chain.proto import gov_pb2

from .errors import WalletError

VOTE_OPTIONS = {name: number for number, name in OPTION_NAMES.items()}
"""Option names the wallet takes (`no-with-veto` is accepted for `no_with_veto`)."""


def param_change(text: str) -> gov_pb2.ParamChange:
    """`market.validator_fee_bps=300` as a change: section, key, and the value as the JSON text after `=`."""
    target, separator, value = text.partition("=")
    section, dot, key = target.strip().partition(".")
    if not (separator and dot and section and key and value.strip()):
        raise WalletError(f"a change is SECTION.KEY=VALUE, e.g. market.validator_fee_bps=300; got {text!r}")
    return gov_pb2.ParamChange(section=section, key=key.strip(), value=value.strip())


def submit_proposal_message(title: str, summary: str, changes: list[str], deposit: int) -> gov_pb2.MsgSubmitProposal:
    if not title.strip():
        raise WalletError("a proposal needs a --title")
    return gov_pb2.MsgSubmitProposal(title=title, summary=summary, initial_deposit=deposit,
                                     changes=[param_change(change) for change in changes])


def deposit_message(proposal_id: int, amount: int) -> gov_pb2.MsgDeposit:
    return gov_pb2.MsgDeposit(proposal_id=proposal_id, amount=amount)


def vote_message(proposal_id: int, option: str) -> gov_pb2.MsgVote:
    number = VOTE_OPTIONS.get(option.strip().lower().replace("-", "_"))
    if number is None:
        raise WalletError(f"unknown vote option {option!r}: choose {', '.join(VOTE_OPTIONS)}")
    return gov_pb2.MsgVote(proposal_id=proposal_id, option=number)
