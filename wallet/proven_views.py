"""The views the wallet and the console show, each read from a proven answer (`proofs.prove_answer`), so what is
shown is what the proofs cover: every field of the answer, listings complete (`trolly.chain.listing_index`).

An account, a task's overview, a worker, the validator listing, one validator with its self-bond and delegator
count, its signing info, a delegator's delegations, unbonding entries and rewards, the proposal listing, one
proposal with its deposits, its tally and votes, a page of the task listing, the params, and a task's rounds:
each page of each round proven on its own (`RoundProof`), its commitments read by key from the proven member
list and their votes by the committee's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .gov_views import DepositView, ProposalView, TallyAnswer, VoteView, read_proposals, read_votes
from .market_answers import parse_answer
from .market_queries import MAX_PAGES, PageReader, get_round, task_page_path, whole_task
from .market_views import RoundView, TaskOverview, TaskPage, TaskSpecView, TaskSummary, TaskView, WorkerView
from .proofs import ProvenAnswer, prove_answer, proved_at
from .rpc import AsyncRpcClient
from .sender import AccountState
from .staking_views import (Delegations, Rewards, SigningInfoView, Unbondings, ValidatorDetail, ValidatorView,
                            read_validators)


@dataclass(frozen=True)
class RoundProof:
    """The proofs of the pages one round of a task was read from (a round of many members takes several)."""

    round: int
    pages: tuple[ProvenAnswer, ...]

    def proof_json(self) -> dict:
        heights = sorted({page.height for page in self.pages})
        return {"verified": True, "note": proved_at(heights), "query_heights": heights, "pages": len(self.pages),
                "keys": sum(page.keys for page in self.pages)}


@dataclass(frozen=True)
class ProvenTask:
    """A whole task whose overview and every page of every round were proven."""

    view: TaskView
    overview: ProvenAnswer
    rounds: tuple[RoundProof, ...]

    def to_answer(self) -> dict:
        """The task's JSON with `proof` beside the overview and beside each round."""
        rounds = [{**detail.to_answer(), "proof": proof.proof_json()}
                  for detail, proof in zip(self.view.round_details, self.rounds)]
        return {**self.view.to_answer(), "proof": self.overview.proof_json(), "round_details": rounds}

    def rounds_note(self) -> str:
        """`proved at height H` (or heights A to B) for every round at once; what shows when there is none."""
        heights = sorted({page.height for proof in self.rounds for page in proof.pages})
        return proved_at(heights) if heights else "no round yet"


async def prove_task(client: AsyncRpcClient, task_id: int) -> ProvenTask:
    """The whole task: its overview proven, then each page of each round it shows."""
    path = f"/market/task/{task_id}"
    proven = await prove_answer(client, path)
    overview = TaskOverview.from_answer(proven.answer, path)
    rounds: list[RoundView] = []
    proofs: list[RoundProof] = []
    for round_index in range(overview.recorded_rounds):
        pages: list[ProvenAnswer] = []
        rounds.append(await get_round(_proving(client, pages), task_id, round_index))
        proofs.append(RoundProof(round_index, tuple(pages)))
    return ProvenTask(whole_task(overview, rounds), proven, tuple(proofs))


def _proving(client: AsyncRpcClient, pages: list[ProvenAnswer]) -> PageReader:
    """A page reader that proves each answer (`prove_answer`) and keeps its proof in `pages`."""
    async def read(path: str) -> Any:
        proven = await prove_answer(client, path)
        pages.append(proven)
        return proven.answer
    return read


async def prove_task_page(client: AsyncRpcClient, after: int = 0, open_only: bool = False
                          ) -> tuple[TaskPage, ProvenAnswer]:
    """One page of the task listing, proven complete (`market_queries.task_page` reads it unproven)."""
    path = task_page_path(after, open_only)
    proven = await prove_answer(client, path)
    return TaskPage.from_answer(proven.answer, path), proven


async def prove_task_listing(client: AsyncRpcClient, open_only: bool = True
                             ) -> tuple[list[TaskSummary], list[ProvenAnswer]]:
    """Every task summary of the listing (only open and running tasks with `open_only`), each page proven."""
    tasks: list[TaskSummary] = []
    proofs: list[ProvenAnswer] = []
    after = 0
    for _ in range(MAX_PAGES):
        page, proven = await prove_task_page(client, after, open_only)
        tasks.extend(page.tasks)
        proofs.append(proven)
        if page.next is None or page.next <= after:
            break
        after = page.next
    return tasks, proofs


async def prove_spec(client: AsyncRpcClient, task_id: int) -> tuple[TaskSpecView, ProvenAnswer]:
    """The task's spec bytes as the chain stores them, proven: what a chart or a fetched model is trained from."""
    path = f"/market/spec/{task_id}"
    proven = await prove_answer(client, path)
    return TaskSpecView.from_answer(proven.answer, path), proven


async def prove_account(client: AsyncRpcClient, address: str) -> tuple[AccountState, ProvenAnswer]:
    """The account record of `address` (balance, nonce, public key), proven; AccountState reads it."""
    path = f"/account/{address}"
    proven = await prove_answer(client, path)
    return AccountState.from_json(proven.answer), proven


async def prove_worker(client: AsyncRpcClient, address: str) -> tuple[WorkerView, ProvenAnswer]:
    path = f"/market/worker/{address}"
    proven = await prove_answer(client, path)
    return WorkerView.from_answer(proven.answer, path), proven


async def prove_validators(client: AsyncRpcClient) -> tuple[tuple[ValidatorView, ...], ProvenAnswer]:
    """Every validator the staking module has, the listing proven complete by its index."""
    proven = await prove_answer(client, "/validators")
    return read_validators(proven.answer or []), proven


async def prove_validator(client: AsyncRpcClient, operator: str) -> tuple[ValidatorDetail, ProvenAnswer]:
    """One validator with its self-bond and delegator count, all proven."""
    path = f"/validator/{operator}"
    proven = await prove_answer(client, path)
    return parse_answer(ValidatorDetail, proven.answer, path), proven


async def prove_signing_info(client: AsyncRpcClient, operator: str) -> tuple[SigningInfoView, ProvenAnswer]:
    """`operator`'s liveness: the chain reads the validator's record for its consensus address, then the signing
    info under it, and the params; each of those keys is proven."""
    path = f"/signing_info/{operator}"
    proven = await prove_answer(client, path)
    return parse_answer(SigningInfoView, proven.answer, path), proven


async def prove_delegations(client: AsyncRpcClient, delegator: str) -> tuple[Delegations, ProvenAnswer]:
    path = f"/delegations/{delegator}"
    proven = await prove_answer(client, path)
    return parse_answer(Delegations, proven.answer, path), proven


async def prove_unbonding(client: AsyncRpcClient, delegator: str) -> tuple[Unbondings, ProvenAnswer]:
    path = f"/unbonding/{delegator}"
    proven = await prove_answer(client, path)
    return parse_answer(Unbondings, proven.answer, path), proven


async def prove_rewards(client: AsyncRpcClient, delegator: str) -> tuple[Rewards, ProvenAnswer]:
    """A delegator's pending rewards: each delegation, its validator and the rewards records they are computed
    from, proven, and the amounts recomputed from them."""
    path = f"/rewards/{delegator}"
    proven = await prove_answer(client, path)
    return parse_answer(Rewards, proven.answer, path), proven


async def prove_proposals(client: AsyncRpcClient) -> tuple[tuple[ProposalView, ...], ProvenAnswer]:
    proven = await prove_answer(client, "/gov/proposals")
    return read_proposals(proven.answer), proven


async def prove_proposal(client: AsyncRpcClient, proposal_id: int
                         ) -> tuple[ProposalView, tuple[DepositView, ...], ProvenAnswer]:
    """A proposal and its deposits, all proven."""
    path = f"/gov/proposal/{proposal_id}"
    proven = await prove_answer(client, path)
    deposits = proven.answer.get("deposits", [])
    return (parse_answer(ProposalView, proven.answer, path),
            tuple(parse_answer(DepositView, d, f"{path}.deposits[{i}]") for i, d in enumerate(deposits)), proven)


async def prove_tally(client: AsyncRpcClient, proposal_id: int) -> tuple[TallyAnswer, ProvenAnswer]:
    """A proposal's tally, live or final: live, every vote and every bonded stake it counts is proven."""
    path = f"/gov/tally/{proposal_id}"
    proven = await prove_answer(client, path)
    return parse_answer(TallyAnswer, proven.answer, path), proven


async def prove_votes(client: AsyncRpcClient, proposal_id: int) -> tuple[tuple[VoteView, ...], ProvenAnswer]:
    path = f"/gov/votes/{proposal_id}"
    proven = await prove_answer(client, path)
    return read_votes(proven.answer), proven


async def prove_params(client: AsyncRpcClient) -> tuple[dict[str, Any], ProvenAnswer]:
    """Every params section, by name."""
    proven = await prove_answer(client, "/params")
    return proven.answer, proven
