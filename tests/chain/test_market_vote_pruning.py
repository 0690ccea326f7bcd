"""A round's votes leave the state once nothing reads them (`market.vote_pruning`): they stay through the round's
reveal window, are deleted when it closes, and so the live state grows per round by the round's commitments only.

Attack (issue 36 item 6, state that only grows): every verdict vote stayed in the state for ever after its round's
reveal window, about 5 KB per worker-round, so a node that runs for months held gigabytes of votes that no rule of
the chain reads again. These tests fail on the code before `vote_pruning` (the votes are still there).
"""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, Market, assert_fails, event_actions, final_message, reveal_message
from market_helpers import spec_bytes, verdict_message
from trolly.chain import keys
from trolly.chain.market.errors import InvalidReveal
from trolly.chain.market.records import VERDICT_PASS
from trolly.chain.proto import market_pb2 as pb

REVEAL_WINDOW = 4
ROUND_BLOCKS = 12
"""Longer than a round's reveal window: the next round's members commit after the window closed."""
PARAMS = {**MARKET_PARAMS, "reveal_window": REVEAL_WINDOW}


def market(make_chain, workers: int = 2, validators: int = 3) -> Market:
    return Market(make_chain(accounts=workers + 1, validators=validators, params={"market": PARAMS}))


def open_task(market_: Market, rounds: int) -> int:
    return market_.open_task(workers=2, collateral=4 * REWARD, rounds=rounds, spec=spec_bytes(rounds=rounds),
                             budget=2 * (rounds + 1) * REWARD, round_blocks=ROUND_BLOCKS)


def stored_votes(chain, task_id: int, round_: int) -> list[bytes]:
    """The committed vote keys of one round of a task."""
    prefix = keys.MARKET_VERDICT + keys.u64(task_id) + keys.u64(round_)
    return [key for key in chain.kv.items if key.startswith(prefix)]


def market_records(chain) -> dict[bytes, bytes]:
    return {key: value for key, value in chain.kv.items.items() if 0x20 <= key[0] <= 0x3f}


def play_round(market_: Market, task_id: int, round_: int) -> None:
    """Commit, sample, two of the three validators vote PASS (two thirds of the whole set, which every segment's
    committee is: the round settles) and reveal."""
    market_.commit(task_id, round_, market_.workers[:2])
    market_.chain.block()  # sampling
    market_.vote(market_.chain.operators[:2], task_id, VERDICT_PASS)
    market_.reveal(task_id)


def test_a_rounds_votes_stay_through_its_reveal_window_and_are_deleted_when_it_closes(make_chain):
    m = market(make_chain)
    chain = m.chain
    task_id = open_task(m, rounds=2)
    play_round(m, task_id, 0)
    assert m.task(task_id)["round"] == 1
    votes = stored_votes(chain, task_id, 0)
    assert len(votes) == 2 * 2 * 2  # two workers, two sampled segments each, two voters on each
    during = m.round_commitments(task_id, 0)
    assert all(len(c["verdicts"]) == 4 and not c["verdicts_deleted"] for c in during.values())

    outputs = chain.advance(REVEAL_WINDOW)
    assert [a["round"] for o in outputs for a in event_actions(o, "reveals_closed")] == ["0"]
    assert stored_votes(chain, task_id, 0) == []
    after = m.round_commitments(task_id, 0)
    for worker, commitment in after.items():
        assert commitment["verdicts"] == [] and commitment["verdicts_deleted"]
        # what the votes decided stays on the commitment
        assert (commitment["outcome"], commitment["decisions"]) == ("passed", during[worker]["decisions"])
        assert commitment["committees"] == during[worker]["committees"]


def test_a_reveal_after_the_window_is_refused_saying_the_votes_are_deleted(make_chain):
    m = market(make_chain)
    chain = m.chain
    task_id = open_task(m, rounds=2)
    m.commit(task_id, 0, m.workers[:2])
    chain.block()
    operator = chain.operators[0]
    item = m.to_verify(operator)[0]
    m.vote(chain.operators[:2], task_id, VERDICT_PASS)
    deadline = int(m.round_commitments(task_id, 0)[item["worker"]]["reveal_deadline"])
    chain.advance(REVEAL_WINDOW)
    late = chain.deliver(operator, reveal_message(task_id, item))
    assert_fails(late, InvalidReveal)
    assert f"closed at height {deadline}: its votes are deleted" in late.log


def test_the_state_grows_per_round_by_its_commitments_only(make_chain):
    """Over several rounds, once each reveal window closed: no vote is left, and what the market's state gained in
    the round is that round's commitments plus a few counters (the task's start hash, members' and workers' pay)."""
    rounds = 4
    m = market(make_chain)
    chain = m.chain
    task_id = open_task(m, rounds)
    growth = []
    for round_ in range(rounds):
        before = market_records(chain)
        play_round(m, task_id, round_)
        chain.advance(REVEAL_WINDOW)
        after = market_records(chain)
        assert not [key for key in after if key.startswith(keys.MARKET_VERDICT)]
        commitments = keys.MARKET_COMMIT + keys.u64(task_id) + keys.u64(round_)
        committed = sum(len(k) + len(v) for k, v in after.items() if k.startswith(commitments))
        assert committed > 0
        size = lambda records: sum(len(k) + len(v) for k, v in records.items())  # noqa: E731
        growth.append(size(after) - size(before) - committed)
    assert all(0 <= extra <= 200 for extra in growth[1:]), growth  # the task's start hash and pay counters


def test_a_task_cancelled_while_its_final_report_is_verified_deletes_that_rounds_votes(make_chain):
    """The final report's round has no reveal window when the task is cancelled before it settles: its votes would
    otherwise stay for ever."""
    m = market(make_chain)
    chain = m.chain
    task_id = open_task(m, rounds=1)
    play_round(m, task_id, 0)
    chain.advance(REVEAL_WINDOW)
    output = chain.block(*[chain.tx(w, final_message(task_id, 1)) for w in m.workers[:2]])
    assert all(r.ok for r in output.tx_results)
    chain.block()  # sampling
    operator = chain.operators[0]
    item = m.to_verify(operator)[0]
    assert chain.deliver(operator, verdict_message(operator, task_id, item, VERDICT_PASS)).ok
    assert len(stored_votes(chain, task_id, 1)) == 1
    assert chain.deliver(m.requester, pb.MsgCancelTask(task_id=task_id)).ok
    assert m.task(task_id)["status"] == "cancelled"
    assert stored_votes(chain, task_id, 1) == []
    assert all(c["verdicts_deleted"] for c in m.round_commitments(task_id, 1).values())

