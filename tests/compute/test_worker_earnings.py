"""Earnings and explained failures (issue 28 items 4 and 5), on the state machine: a worker paid, one slashed by
FAIL votes, one dropped for a missed round; `task_earnings` gives each the chain's own figures (the market's
`payout`, `slash` and `dropped` events, to the unit) and `explain_task` says why one was not paid. The real task
on a dev node, with fees and the balance change, is in test_worker_earnings_e2e.py."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, Market, event_actions, verdict_message
from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.compute.worker.earnings import Charged, task_earnings
from trolly.compute.worker.why import explain_task, finding_lines
from trolly.wallet.market_views import TaskView
from whole_task import whole_task

COLLATERAL = 4 * REWARD


def view_of(chain, task_id) -> TaskView:
    return TaskView.from_answer(whole_task(chain.query, task_id))


def events_of(outputs, action):
    return [event for output in outputs for event in event_actions(output, action)]


def settled_round(make_chain, fail_second: bool):
    """Round 0 of a two-worker task: worker 0 committed and passes; worker 1 committed and is voted FAIL by two
    of three validators (`fail_second`), or did not commit and is dropped at the deadline. Returns (chain,
    market, task id, every block's output)."""
    chain = make_chain(accounts=3, validators=3, params={"market": MARKET_PARAMS})
    market = Market(chain)
    task_id = market.open_task(workers=2, collateral=COLLATERAL)
    outputs = [market.commit(task_id, 0, market.workers[:2] if fail_second else market.workers[:1])]
    late = encode_address(market.workers[1].address)
    while not fail_second and market.task(task_id)["phase"] == "commit":  # until the commit deadline passes
        outputs.append(chain.block())
    outputs.append(chain.block())  # the sampling block
    votes = []
    for operator in chain.operators[:2]:
        for item in market.to_verify(operator):
            if item["task_id"] == task_id:
                wanted = VERDICT_FAIL if item["worker"] == late else VERDICT_PASS
                votes.append(chain.tx(operator, verdict_message(operator, task_id, item, wanted)))
    outputs.append(chain.block(*votes))
    return chain, market, task_id, outputs


def test_a_paid_member_and_a_slashed_member_match_the_chains_events(make_chain):
    chain, market, task_id, outputs = settled_round(make_chain, fail_second=True)
    honest, cheater = (encode_address(w.address) for w in market.workers[:2])
    view = view_of(chain, task_id)
    paid = task_earnings(view, honest, [Charged(7, "join", task_id), Charged(5, "commit", task_id, 0)])
    payouts = {e["worker"]: int(e["amount"]) for e in events_of(outputs, "payout")}
    assert [(r.round, r.outcome, r.pay, r.fees) for r in paid.rounds] == [(0, "passed", payouts[honest], 5)]
    assert paid.pay == payouts[honest] > 0 and paid.deductions == () and paid.fees == 12
    assert (paid.member_status, paid.collateral_locked, paid.collateral_returned) == ("active", COLLATERAL, 0)

    slashed = task_earnings(view, cheater, [])
    slash = events_of(outputs, "slash")
    assert [(d.kind, d.amount, d.reason) for d in slashed.deductions] == [
        ("slash", int(slash[0]["amount"]), "verification failed")]
    assert slashed.collateral_returned == 0 and slashed.pay == 0 and slashed.net == -COLLATERAL
    assert slashed.rounds[0].outcome == "failed"


def test_why_names_the_fail_votes_and_how_to_get_the_verifiers_reason(make_chain):
    chain, market, task_id, _ = settled_round(make_chain, fail_second=True)
    honest, cheater = (encode_address(w.address) for w in market.workers[:2])
    view = view_of(chain, task_id)
    findings = explain_task(view, cheater)
    assert [f.round for f in findings] == [0, 0] and findings[0].what.startswith("failed, paid 0 utrl")
    assert findings[1].what.startswith("slashed in round 0 (verification failed): slash of")
    details = "\n".join(findings[0].details)
    assert "voted FAIL" in details and encode_address(chain.operators[0].address) in details
    assert f"trolly-verifier replay --task {task_id} --round 0 --worker {cheater} --segment" in details
    assert explain_task(view, honest) == []
    assert "nothing unpaid" in "\n".join(finding_lines(view, honest, []))
    stranger = encode_address(chain.accounts[0].address)
    assert "not a member" in explain_task(view, stranger)[0].what


def test_a_missed_round_is_a_penalty_with_its_reason_and_the_rest_of_the_collateral_back(make_chain):
    chain, market, task_id, outputs = settled_round(make_chain, fail_second=False)
    late = encode_address(market.workers[1].address)
    view = view_of(chain, task_id)
    dropped = events_of(outputs, "dropped")
    assert [e["worker"] for e in dropped] == [late]
    earned = task_earnings(view, late, [Charged(9, "join", task_id)])
    assert [(d.round, d.kind, d.amount, d.reason) for d in earned.deductions] == [
        (0, "penalty", int(dropped[0]["penalty"]), "missed round")]
    assert earned.collateral_returned == COLLATERAL - int(dropped[0]["penalty"]) and earned.rounds == ()
    assert earned.net == -int(dropped[0]["penalty"]) - 9
    findings = explain_task(view, late)
    assert [f.what for f in findings] == ["no commitment before the round's deadline: missed",
                                          f"dropped in round 0 (missed round): penalty of {dropped[0]['penalty']} "
                                          f"utrl from its collateral"]


def test_each_fee_is_counted_where_its_message_belongs(make_chain):
    from trolly.chain.proto import market_pb2 as pb
    from trolly.compute.worker.earnings import charged
    from trolly.wallet.rpc_types import Event, TxResult

    chain = make_chain(accounts=2, validators=1)
    key = chain.accounts[1]

    def included(message, fee_event: bool = True):
        raw = chain.tx(key, message)
        events = (Event("tx", (("fee", "2560"), ("signer", encode_address(key.address)), ("nonce", "0"))),) \
            if fee_event else ()
        return TxResult("AB" * 32, 5, 0, 0, "", "", events, raw)

    assert charged(included(pb.MsgJoinTask(task_id=4))) == Charged(2560, "join", 4)
    assert charged(included(pb.MsgCommitRound(task_id=4, round=2))) == Charged(2560, "commit", 4, 2)
    assert charged(included(pb.MsgUnregisterWorker())) == Charged(2560, "other")
    assert charged(included(pb.MsgJoinTask(task_id=4), fee_event=False)) is None  # refused before its fee
