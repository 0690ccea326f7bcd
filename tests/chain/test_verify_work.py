"""`/market/verify/<validator>` found through the records (`chain/market/verify_work.py`) answers what the scan of
every pending-segment key answered before, in the same order, through a round's whole verification (partial
votes, a dissent escalated to the whole set, settlement, the next round, two tasks at once); and the invariant
that backs it catches a pending key the records do not name."""

from __future__ import annotations

import pytest
from market_helpers import MARKET_PARAMS, Market, verdict_message

from trolly.chain import keys
from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.market.store import find_commitment, find_vote, pending_segments
from trolly.chain.market.verify_work import verify_work
from trolly.chain.module import InvariantBroken
from trolly.chain.modules.market import check_pending_segments


def scanned_work(state, validator: bytes) -> list[tuple]:
    """What the former answer listed: every pending key, scanned, filtered as before."""
    found = []
    for task_id, round_, worker, segment in pending_segments(state):
        if worker == validator or find_vote(state, task_id, round_, worker, segment, validator) is not None:
            continue
        commitment = find_commitment(state, task_id, round_, worker)
        if validator.hex() in commitment.committees[commitment.segments.index(segment)]:
            found.append((task_id, round_, encode_address(worker), segment))
    return found


def assert_same_work(chain) -> int:
    """The records-found work equals the scanned one for every validator; how many items there were."""
    total = 0
    for operator in chain.operators:
        work = [(w["task_id"], w["round"], w["worker"], w["segment"]) for w in verify_work(chain.state, operator.address)]
        assert work == scanned_work(chain.state, operator.address)
        total += len(work)
    return total


@pytest.fixture
def two_tasks(make_chain):
    chain = make_chain(accounts=5, validators=4, params={"market": {**MARKET_PARAMS, "committee_size": 3}})
    market = Market(chain)
    market.register()
    tasks = []
    for pair in (market.workers[:2], market.workers[2:4]):
        task_id = market.submit(workers=2)
        market.join(task_id, pair)
        tasks.append((task_id, pair))
    return chain, market, tasks


def test_the_work_found_through_the_records_is_the_work_the_scan_found(two_tasks):
    chain, market, tasks = two_tasks
    seen = [assert_same_work(chain)]
    for task_id, pair in tasks:
        market.commit(task_id, 0, pair)
    chain.block()  # sampling
    seen.append(assert_same_work(chain))
    first = chain.operators[0]
    votes = [chain.tx(first, verdict_message(first, task_id, item, VERDICT_PASS if i % 2 else VERDICT_FAIL))
             for i, item in enumerate(market.to_verify(first)) for task_id in [item["task_id"]]]
    chain.block(*votes)  # a dissent on some segments, one vote of several on the others
    seen.append(assert_same_work(chain))
    for _ in range(MARKET_PARAMS["verification_window"] + 1):  # the window closes: dissents escalate
        chain.block()
        seen.append(assert_same_work(chain))
    for _ in range(MARKET_PARAMS["verification_window"] + 2):  # the escalated window closes: the rounds settle
        chain.block()
        seen.append(assert_same_work(chain))
    assert seen[0] == 0 and max(seen) > 0 and seen[-1] == 0


def test_a_pending_key_the_records_do_not_name_breaks_the_invariant(two_tasks):
    chain, market, tasks = two_tasks
    task_id, pair = tasks[0]
    market.commit(task_id, 0, pair)
    chain.block()  # sampling
    check_pending_segments(chain.state)
    (task, round_, worker, segment) = next(iter(pending_segments(chain.state)))
    stray = keys.market_pending_segment_key(task, round_ + 1, worker, segment)
    chain.kv.items[stray] = b""
    with pytest.raises(InvariantBroken, match="pending segments"):
        check_pending_segments(chain.state)
    del chain.kv.items[stray]  # the fixture's chain checks its invariants when the test ends
