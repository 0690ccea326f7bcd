"""gov `MsgVote`: vote yes, abstain, no or no-with-veto on a proposal in its voting period.

Any account may vote (as in the anchor); what its vote weighs is decided at the tally, from the stake it has
bonded then (`gov.tally`). A later vote by the same account replaces its earlier one.
"""

from __future__ import annotations

from ..block import BlockContext, Event
from ..crypto import encode_address
from ..gov.errors import InvalidVoteOption, NotInVotingPeriod
from ..gov.store import DEPOSIT_PERIOD, OPTION_NAMES, VOTING_PERIOD, get_proposal, set_vote
from ..proto.gov_pb2 import MsgVote
from ..state import State


def validate_vote(msg: MsgVote) -> None:
    if msg.option not in OPTION_NAMES:
        raise InvalidVoteOption(f"vote option {msg.option} is not one of "
                                f"{', '.join(f'{number} ({name})' for number, name in OPTION_NAMES.items())}")


def process_vote(state: State, ctx: BlockContext, signer: bytes, msg: MsgVote) -> None:
    proposal = get_proposal(state, msg.proposal_id)
    if proposal.status != VOTING_PERIOD:
        when = ("its deposits have not reached gov.min_deposit yet" if proposal.status == DEPOSIT_PERIOD
                else f"it was already decided ({proposal.status})")
        raise NotInVotingPeriod(f"proposal {proposal.id} is not in its voting period: {when}")
    replaced = set_vote(state, proposal.id, signer, msg.option)
    ctx.emit(Event.of("proposal_vote", proposal_id=proposal.id, voter=encode_address(signer),
                      option=OPTION_NAMES[msg.option], replaced=str(replaced).lower()))
