"""gov `MsgSubmitProposal`: propose param changes (or only a text), with a first deposit.

Stateless: a title of 1..140 bytes without control characters, a summary of at most 4096 bytes, at most 32
changes, each naming a section and a key in lowercase words and carrying an integer, no (section, key) twice.
Stateful: every change is checked on the params as they would be after all of them (`gov.changes`): an
unknown or fixed param, a value out of its range, or a broken cross-section rule refuses the proposal with
nothing changed. The initial deposit moves into the deposits account; when it already reaches `min_deposit`
the voting period starts at once.
"""

from __future__ import annotations

import re

from ..block import BlockContext, Event
from ..crypto import encode_address
from ..gov.changes import Change, params_after, parse_value
from ..gov.errors import InitialDepositTooLow, InvalidProposal
from ..gov.lifecycle import start_voting_if_funded
from ..gov.params import GovParams
from ..gov.store import DEPOSIT_PERIOD, Proposal, add_deposit, next_proposal_id, put_proposal, schedule
from ..params import get_params
from ..proto.gov_pb2 import MsgSubmitProposal
from ..state import State

MAX_TITLE_BYTES = 140
MAX_SUMMARY_BYTES = 4096
MAX_CHANGES = 32
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def proposal_changes(msg: MsgSubmitProposal) -> tuple[Change, ...]:
    """The (section, key, value) of each change, values parsed (InvalidParamValue if one is not an integer)."""
    return tuple((change.section, change.key, parse_value(change.value)) for change in msg.changes)


def validate_submit_proposal(msg: MsgSubmitProposal) -> None:
    title_bytes = len(msg.title.encode())
    if not 1 <= title_bytes <= MAX_TITLE_BYTES:
        raise InvalidProposal(f"the title must be 1..{MAX_TITLE_BYTES} bytes of UTF-8, got {title_bytes}")
    if any(ord(character) < 0x20 or 0x7F <= ord(character) <= 0x9F for character in msg.title):
        raise InvalidProposal("the title must not contain control characters")
    if len(msg.summary.encode()) > MAX_SUMMARY_BYTES:
        raise InvalidProposal(f"the summary must be at most {MAX_SUMMARY_BYTES} bytes of UTF-8")
    if len(msg.changes) > MAX_CHANGES:
        raise InvalidProposal(f"a proposal carries at most {MAX_CHANGES} changes, got {len(msg.changes)}")
    seen = set()
    for change in msg.changes:
        if not (_NAME.fullmatch(change.section) and _NAME.fullmatch(change.key)):
            raise InvalidProposal(f"a change must name a section and a key in lowercase words, got "
                                  f"{change.section[:64]!r}.{change.key[:64]!r}")
        if (change.section, change.key) in seen:
            raise InvalidProposal(f"{change.section}.{change.key} is changed twice in one proposal")
        seen.add((change.section, change.key))
    proposal_changes(msg)


def process_submit_proposal(state: State, ctx: BlockContext, signer: bytes, msg: MsgSubmitProposal,
                            param_types: tuple[type, ...]) -> None:
    params = get_params(state, GovParams)
    changes = proposal_changes(msg)
    params_after(state, param_types, changes)
    if msg.initial_deposit < params.min_initial_deposit():
        raise InitialDepositTooLow(f"the initial deposit {msg.initial_deposit}utrl is below "
                                   f"{params.min_initial_deposit()}utrl (gov.min_initial_deposit_bps "
                                   f"{params.min_initial_deposit_bps} of gov.min_deposit {params.min_deposit})")
    proposal_id = next_proposal_id(state)
    if msg.initial_deposit:
        add_deposit(state, proposal_id, signer, msg.initial_deposit)
    height = ctx.env.height
    proposal = Proposal(id=proposal_id, proposer=encode_address(signer), title=msg.title, summary=msg.summary,
                        changes=changes, status=DEPOSIT_PERIOD, submit_height=height,
                        deposit_end_height=height + params.max_deposit_blocks, total_deposit=msg.initial_deposit)
    schedule(state, proposal.deposit_end_height, proposal_id)
    ctx.emit(Event.of("proposal_submitted", proposal_id=proposal_id, proposer=proposal.proposer,
                      changes=len(changes), deposit=msg.initial_deposit,
                      deposit_end_height=proposal.deposit_end_height))
    put_proposal(state, start_voting_if_funded(state, ctx, proposal, params))
