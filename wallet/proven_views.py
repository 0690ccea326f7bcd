"""The views the wallet and the console show, each read from a proven answer (`proofs.prove_answer`), so what is
shown is what the proof covers: an account, a task's overview, a worker, every validator.

A task's rounds (other keys, read page by page after the overview) and the validator listing itself (which
validators there are) are not covered by a proof: each listed validator's record is.
"""

from __future__ import annotations

from .market_answers import parse_answer
from .market_queries import get_task
from .market_views import TaskOverview, TaskView, WorkerView
from .proofs import ProvenAnswer, prove_answer
from .rpc import AsyncRpcClient
from .staking_views import ValidatorView, get_validators


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
