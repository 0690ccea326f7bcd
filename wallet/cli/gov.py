"""`trolly-wallet tx gov ...` and `trolly-wallet query proposals|proposal|tally`: governance of parameters.

A proposal changes params by `--change SECTION.KEY=VALUE` (any number; none makes a text proposal) and carries
a first deposit; `deposit` adds to it until the chain's minimum starts its vote; `vote` casts (or replaces) the
signer's vote. The chain checks every change on the params as they would be after all of them.
"""

from __future__ import annotations

import click

from ..amounts import parse_amount
from ..gov_messages import VOTE_OPTIONS, deposit_message, submit_proposal_message, vote_message
from ..gov_views import ProposalView
from ..market_answers import plain
from ..proven_views import prove_proposal, prove_proposals, prove_tally
from ..command_line.errors import WalletGroup
from ..command_line.options import node_options, output_option, settings
from ..command_line.output import amount_text, emit, print_key_values, print_proof, print_table, proof_text
from .transactions import TransactionFlags, run_transaction, transaction_options


@click.group(cls=WalletGroup)
def gov() -> None:
    """Propose parameter changes, deposit on proposals, vote."""


@gov.command("submit-proposal")
@click.option("--title", required=True, help="A short title (1-140 bytes).")
@click.option("--summary", default="", help="What the proposal does and why (up to 4096 bytes).")
@click.option("--change", "changes", multiple=True, metavar="SECTION.KEY=VALUE",
              help="A param change, e.g. market.validator_fee_bps=300; repeat for several; none: a text proposal.")
@click.option("--deposit", default="0utrl", show_default=True, help="First deposit, e.g. 10trl.")
@transaction_options
def submit_proposal(title: str, summary: str, changes: tuple[str, ...], deposit: str, **flags) -> None:
    """Submit a proposal from the --from account."""
    amount = parse_amount(deposit, allow_zero=True, what="deposit")
    run_transaction(TransactionFlags(**flags), [submit_proposal_message(title, summary, list(changes), amount)])


@gov.command("deposit")
@click.argument("proposal_id", type=click.IntRange(min=1))
@click.argument("amount")
@transaction_options
def deposit(proposal_id: int, amount: str, **flags) -> None:
    """Add AMOUNT to PROPOSAL_ID's deposit."""
    run_transaction(TransactionFlags(**flags), [deposit_message(proposal_id, parse_amount(amount, what="deposit"))])


@gov.command("vote")
@click.argument("proposal_id", type=click.IntRange(min=1))
@click.argument("option", type=click.Choice(sorted(VOTE_OPTIONS) + ["no-with-veto"], case_sensitive=False))
@transaction_options
def vote(proposal_id: int, option: str, **flags) -> None:
    """Vote OPTION on PROPOSAL_ID (a later vote replaces this one)."""
    run_transaction(TransactionFlags(**flags), [vote_message(proposal_id, option)])


def _changes_text(view: ProposalView) -> str:
    return ", ".join(f"{c.section}.{c.key}={c.value}" for c in view.changes) or "(text)"


@click.command("proposals")
@node_options
@output_option
def proposals() -> None:
    """Every proposal with its status; the listing is proven complete against the next block's app hash (exit 11
    if it does not hold)."""
    options = settings()
    client = options.client()
    found, proven = client.run(prove_proposals(client.async_client))
    proof = proven.proof_json()

    def render(_: list) -> None:
        print_table(["id", "status", "title", "changes", "deposit"],
                    [[p.id, p.status, p.title, _changes_text(p), amount_text(p.total_deposit)] for p in found],
                    empty="No proposals.")
        print_proof(proof)

    emit([{**p.to_answer(), "proof": proof} for p in found], options.json, render)


@click.command("proposal")
@click.argument("proposal_id", type=click.IntRange(min=1))
@node_options
@output_option
def proposal(proposal_id: int) -> None:
    """One proposal: its changes, periods, deposits and outcome, all proven against the next block's app hash (exit
    11 if a proof does not hold)."""
    options = settings()
    client = options.client()
    view, deposits, proven = client.run(prove_proposal(client.async_client, proposal_id))
    result = {**view.to_answer(), "deposits": [plain(d) for d in deposits], "proof": proven.proof_json()}

    def render(_: dict) -> None:
        rows = [("id", view.id), ("title", view.title), ("status", view.status), ("proposer", view.proposer),
                ("changes", _changes_text(view)), ("deposit", amount_text(view.total_deposit)),
                ("deposit ends at", view.deposit_end_height), ("voting ends at", view.voting_end_height or "-"),
                ("outcome", view.outcome or "-")]
        rows += [(f"deposit by {d.depositor}", amount_text(d.amount)) for d in deposits]
        rows.append(("proof", proof_text(result["proof"])))
        print_key_values(rows)

    emit(result, options.json, render)


@click.command("tally")
@click.argument("proposal_id", type=click.IntRange(min=1))
@node_options
@output_option
def tally(proposal_id: int) -> None:
    """PROPOSAL_ID's tally: live while it votes (with what it would decide now), final afterwards. Every vote and
    bonded stake it counts is proven against the next block's app hash (exit 11 if a proof does not hold)."""
    options = settings()
    client = options.client()
    answer, proven = client.run(prove_tally(client.async_client, proposal_id))
    result = {**answer.to_answer(), "proof": proven.proof_json()}

    def render(_: dict) -> None:
        counts = answer.tally
        rows = [("proposal", answer.proposal_id), ("status", answer.status), ("final", answer.final)]
        rows += [(name.replace("_", "-"), amount_text(getattr(counts, name)))
                 for name in ("yes", "no", "no_with_veto", "abstain", "voted", "total_bonded")]
        rows.append(("outcome", answer.outcome or "-"))
        rows.append(("proof", proof_text(result["proof"])))
        print_key_values(rows)

    emit(result, options.json, render)


QUERY_COMMANDS = (proposals, proposal, tally)
"""The governance commands of `trolly-wallet query`."""
