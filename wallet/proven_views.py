"""The views the wallet and the console show, each read from a proven answer (`proofs.prove_answer`), so what is
shown is what the proof covers: an account, a task's overview, a worker, every validator, one validator's detail,
its signing info, a governance proposal.

A task's rounds (other keys, read page by page after the overview), the validator listing itself (which
validators there are), a validator's self-bond and delegator count, a proposal's deposits and a signing info's
window and threshold (params) are not covered by a proof: the records named are.
"""

from __future__ import annotations

from .gov_views import DepositView, ProposalView
from .market_answers import parse_answer
from .market_queries import get_task
from .market_views import TaskOverview, TaskView, WorkerView
from .proofs import ProvenAnswer, prove_answer
from .proven_records import signing_info_expectation
from .rpc import AsyncRpcClient
from .staking_views import SigningInfoView, ValidatorDetail, ValidatorView, get_validators


async def prove_task(client: AsyncRpcClient, task_id: int) -> tuple[TaskView, ProvenAnswer]:
    """The whole task, its overview proven (the rounds follow, unproven)."""
    path = f"/market/task/{task_id}"
    proven = await prove_answer(client, path)
    return await get_task(client, task_id, TaskOverview.from_answer(proven.answer, path)), proven


async def prove_worker(client: AsyncRpcClient, address: str) -> tuple[WorkerView, ProvenAnswer]:
    path = f"/market/worker/{address}"
    proven = await prove_answer(client, path)
    return WorkerView.from_answer(proven.answer, path), proven


async def prove_validators(client: AsyncRpcClient) -> list[tuple[ValidatorView, ProvenAnswer]]:
    """Every validator the staking module lists, each read again from its own proven answer."""
    found = []
    for listed in await get_validators(client):
        path = f"/validator/{listed.operator}"
        proven = await prove_answer(client, path)
        found.append((parse_answer(ValidatorView, proven.answer, path), proven))
    return found


async def prove_validator(client: AsyncRpcClient, operator: str) -> tuple[ValidatorDetail, ProvenAnswer]:
    """One validator with its self-bond and delegator count; its record proven (those two are not)."""
    path = f"/validator/{operator}"
    proven = await prove_answer(client, path)
    return parse_answer(ValidatorDetail, proven.answer, path), proven


async def prove_signing_info(client: AsyncRpcClient, operator: str, validator: ProvenAnswer | None = None
                             ) -> tuple[SigningInfoView, ProvenAnswer]:
    """`operator`'s liveness: the validator's record is proven first (or `validator`, its answer already proven),
    for the consensus address its signing info is stored under (a consensus key never changes), then the signing
    info, at the latest height (a node proves no past height). The answer's `jailed` is the validator record's,
    a later height's than the one proven here: not covered (`fields` does not name it)."""
    if validator is None:
        _, validator = await prove_validator(client, operator)
    consensus_address = bytes.fromhex(validator.answer["consensus_address"])  # proven: a field of the record
    path = f"/signing_info/{operator}"
    proven = await prove_answer(client, path, expectation=signing_info_expectation(operator, consensus_address))
    return parse_answer(SigningInfoView, proven.answer, path), proven


async def prove_proposal(client: AsyncRpcClient, proposal_id: int
                         ) -> tuple[ProposalView, tuple[DepositView, ...], ProvenAnswer]:
    """A proposal, its record proven, and its deposits (other keys, not proven)."""
    path = f"/gov/proposal/{proposal_id}"
    proven = await prove_answer(client, path)
    deposits = proven.answer.get("deposits", [])
    return (parse_answer(ProposalView, proven.answer, path),
            tuple(parse_answer(DepositView, d, f"{path}.deposits[{i}]") for i, d in enumerate(deposits)), proven)
