"""A task comes in bounded pieces: `/market/task/<id>` answers its overview (terms, members, how many rounds it
shows) and `/market/task/<id>/round/<r>[/after/<index>][/limit/<n>]` one round with a page of its commitments, so
what one query costs the app (store entries read, bytes answered) does not grow with the task's rounds or
workers. Clients follow the pages (`market_queries.get_task`) and assemble the whole task as one answer gave it
before; a page asked for wrongly is a clear error, as a wrong task listing is."""

from __future__ import annotations

import dataclasses
import json

import pytest

from chain_helpers import Chain
from market_helpers import MARKET_PARAMS, Market, digest
from trolly.chain import keys
from trolly.chain.app import query
from trolly.chain.errors import InvalidRequest, NotFound
from trolly.chain.market.queries import MAX_COMMITMENTS_PER_PAGE
from trolly.chain.market.records import Commitment, decode_record
from trolly.chain.market.store import find_member, get_task, put_commitment, put_member, put_task
from trolly.chain.state import State
from trolly.wallet.market_views import TaskView
from whole_task import whole_task


@pytest.fixture
def started():
    """(chain, task id): three workers; round 0 committed by all, sampled, voted on and revealed; round 1
    committed by workers 0 and 2 only."""
    chain = Chain(accounts=5, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    task_id = market.open_task(workers=3)
    market.commit(task_id, 0, market.workers[:3])
    chain.block()  # the sampling block
    market.vote([chain.operators[0]], task_id)
    market.reveal(task_id)
    market.commit(task_id, 1, [market.workers[0], market.workers[2]])
    return chain, task_id


class CountingReader:
    """A store that counts what a query reads from it: each key got, each iteration started and each entry it
    yields."""

    def __init__(self, store: State) -> None:
        self.store, self.reads = store, 0

    def get(self, key: bytes) -> bytes | None:
        self.reads += 1
        return self.store.get(key)

    def iterate(self, prefix: bytes):
        self.reads += 1
        for item in self.store.iterate(prefix):
            self.reads += 1
            yield item


def cost(chain: Chain, path: str) -> tuple[int, int]:
    """(store reads, answer bytes) of one query through the real query code."""
    reader = CountingReader(chain.state)
    answer = query(State(reader), path).value
    return reader.reads, len(json.dumps(answer))


def copy_round_zero(chain: Chain, task_id: int, to_round: int, worker_map: dict[bytes, bytes] | None = None) -> None:
    """Write round 0's commitments and votes again as round `to_round`'s (of other workers, with `worker_map`)."""
    state = chain.state
    worker_map = worker_map or {}
    commits = keys.MARKET_COMMIT + keys.u64(task_id) + keys.u64(0)
    for key, raw in list(state.iterate(commits)):
        old = decode_record(Commitment, raw)
        if worker_map and old.worker not in worker_map:
            continue
        worker = worker_map.get(old.worker, old.worker)
        put_commitment(state, dataclasses.replace(old, round=to_round, worker=worker))
    votes = keys.MARKET_VERDICT + keys.u64(task_id) + keys.u64(0)
    for key, raw in list(state.iterate(votes)):
        worker, rest = key[len(votes):len(votes) + 20], key[len(votes) + 20:]
        if not worker_map or worker in worker_map:
            state.set(votes[:-8] + keys.u64(to_round) + worker_map.get(worker, worker) + rest, raw)
    chain.kv.apply(state.changes())


def grow_rounds(chain: Chain, task_id: int, rounds: int) -> None:
    """Give the task `rounds` recorded rounds, each like round 0 (the chain itself would take as many blocks)."""
    for r in range(2, rounds):
        copy_round_zero(chain, task_id, r)
    state = chain.state
    task = get_task(state, task_id)
    task.rounds, task.round = rounds + 1, rounds - 1
    task.round_start_hashes = [digest(f"W{r}") for r in range(rounds - 1)]
    put_task(state, task)
    chain.kv.apply(state.changes())


def grow_members(chain: Chain, task_id: int, count: int) -> None:
    """Add `count` members to the task, each with a round 0 commitment and votes like member 0's."""
    state = chain.state
    task = get_task(state, task_id)
    first = find_member(state, task_id, task.members[0])
    added = [bytes([0xA0, i]) * 10 for i in range(count)]
    for worker in added:
        put_member(state, dataclasses.replace(first, worker=worker, index=len(task.members)))
        task.members.append(worker)
    put_task(state, task)
    chain.kv.apply(state.changes())
    for worker in added:
        copy_round_zero(chain, task_id, 0, {task.members[0]: worker})


# ---- what one query costs -------------------------------------------------------------------------------

def test_the_task_query_reads_and_answers_as_much_for_300_rounds_as_for_two(started):
    chain, task_id = started
    reads, size = cost(chain, f"/market/task/{task_id}")
    assert reads == 1 + 2 * 3  # the task, then each member's record and its worker's
    grow_rounds(chain, task_id, 300)
    assert chain.query(f"/market/task/{task_id}")["recorded_rounds"] == 300
    grown_reads, grown_size = cost(chain, f"/market/task/{task_id}")
    assert grown_reads == reads and grown_size <= size + 16  # only numbers grew a digit or two


def test_a_round_page_reads_as_much_for_40_commitments_as_for_17(started):
    chain, task_id = started
    page = f"/market/task/{task_id}/round/0"
    one_commitment, _ = cost(chain, f"{page}/limit/1")
    grow_members(chain, task_id, MAX_COMMITMENTS_PER_PAGE + 1 - 3)
    seventeen = cost(chain, page)
    grow_members(chain, task_id, 40 - MAX_COMMITMENTS_PER_PAGE - 1)
    forty = cost(chain, page)
    assert forty == seventeen
    assert len(chain.query(page)["commitments"]) == MAX_COMMITMENTS_PER_PAGE
    # One commitment costs the task, its commitment and votes, and the next one's key: a full page is its
    # commitments' worth of that, never the round's.
    assert forty[0] <= MAX_COMMITMENTS_PER_PAGE * one_commitment


# ---- following the pages --------------------------------------------------------------------------------

def follow_round(chain: Chain, task_id: int, round_: int, limit: int) -> tuple[dict, list]:
    """Round `round_` whole, read `limit` commitments a page by hand, and the `next` of every page."""
    path = f"/market/task/{task_id}/round/{round_}/limit/{limit}"
    page = chain.query(path)
    commitments, nexts = list(page["commitments"]), [page["next"]]
    while page["next"] is not None:
        page = chain.query(f"/market/task/{task_id}/round/{round_}/after/{page['next']}/limit/{limit}")
        commitments += page["commitments"]
        nexts.append(page["next"])
    del page["next"]
    return {**page, "commitments": commitments}, nexts


def test_the_whole_task_is_its_overview_and_every_round_followed_page_by_page(started):
    chain, task_id = started
    overview = chain.query(f"/market/task/{task_id}")
    (round_zero, nexts_zero), (round_one, nexts_one) = (follow_round(chain, task_id, r, 1) for r in (0, 1))
    assert nexts_zero == [0, 1, None] and nexts_one == [0, None]  # member 1 did not commit round 1
    assert [c["worker"] for c in round_one["commitments"]] == [overview["members"][i]["worker"] for i in (0, 2)]
    whole = whole_task(chain.query, task_id)
    assert whole == {**{k: v for k, v in overview.items() if k != "recorded_rounds"},
                     "round_details": [round_zero, round_one]}
    assert TaskView.from_answer(whole).to_answer() == whole
    assert list(whole) == list(TaskView.from_answer(whole).to_answer())  # the same document, key for key


def test_a_page_after_the_last_member_is_empty_and_the_last(started):
    chain, task_id = started
    for after in (2, 3, 10**19):
        page = chain.query(f"/market/task/{task_id}/round/0/after/{after}")
        assert (page["commitments"], page["next"]) == ([], None)


@pytest.mark.parametrize("tail", [
    "x", "round", "round/x", "round/-1", "round/\u0661", "round/0/after", "round/0/after/x", "round/0/after/-1",
    "round/0/limit/0", f"round/0/limit/{MAX_COMMITMENTS_PER_PAGE + 1}", "round/0/limit/1/limit/2",
    "round/0/after/1/after/2", "round/0/sideways/2", "round/0/after/1/limit/2/more", "rounds", "1",
])
def test_a_page_asked_for_wrongly_is_an_invalid_request_that_says_how_to_ask(started, tail):
    chain, task_id = started
    with pytest.raises(InvalidRequest, match=r"use /market/task/<id> or /market/task/<id>/round/<r>"):
        chain.query(f"/market/task/{task_id}/{tail}")


def test_a_round_not_shown_yet_or_a_missing_task_is_not_found(started):
    chain, task_id = started
    assert chain.query(f"/market/task/{task_id}/round/1/limit/1/after/0")["next"] is None  # options in any order
    for path in (f"/market/task/{task_id}/round/2", "/market/task/99/round/0", "/market/task/99"):
        with pytest.raises(NotFound):
            chain.query(path)
    other = Market(chain).submit(workers=2)  # open: no rounds yet
    assert chain.query(f"/market/task/{other}")["recorded_rounds"] == 0
    with pytest.raises(NotFound, match=f"task {other} has no round 0 yet"):
        chain.query(f"/market/task/{other}/round/0")
