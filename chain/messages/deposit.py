"""gov `MsgDeposit`: add to a live proposal's deposit; reaching `min_deposit` starts its voting period.

As in the anchor, a proposal takes deposits in its deposit period and in its voting period (they are refunded
or burned with the rest when it is decided); a decided proposal takes none, and one deleted when its deposit
period ended short of the minimum no longer exists.
"""

from __future__ import annotations

import dataclasses

from ..accounts import check_amount
from ..block import BlockContext, Event
from ..crypto import encode_address
from ..gov.errors import ProposalClosed
from ..gov.lifecycle import start_voting_if_funded
from ..gov.params import GovParams
from ..gov.store import LIVE_STATUSES, add_deposit, get_proposal, put_proposal
from ..params import get_params
from ..proto.gov_pb2 import MsgDeposit
from ..state import State


def validate_deposit(msg: MsgDeposit) -> None:
    check_amount(msg.amount, "deposit")


def process_deposit(state: State, ctx: BlockContext, signer: bytes, msg: MsgDeposit) -> None:
    proposal = get_proposal(state, msg.proposal_id)
    if proposal.status not in LIVE_STATUSES:
        raise ProposalClosed(f"proposal {proposal.id} is {proposal.status}: it takes no more deposits")
    add_deposit(state, proposal.id, signer, msg.amount)
    proposal = dataclasses.replace(proposal, total_deposit=proposal.total_deposit + msg.amount)
    ctx.emit(Event.of("proposal_deposit", proposal_id=proposal.id, depositor=encode_address(signer),
                      amount=msg.amount, total_deposit=proposal.total_deposit))
    put_proposal(state, start_voting_if_funded(state, ctx, proposal, get_params(state, GovParams)))
