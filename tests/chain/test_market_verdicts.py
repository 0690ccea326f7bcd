"""Verdicts: tallies by validator power (two thirds), slashing of caught workers, refused verdicts."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, Market, assert_fails, event_actions, market_snapshot
from market_helpers import reveal_message, verdict_message
from trolly.chain.accounts import get_supply
from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.market.errors import DuplicateVerdict, InvalidVerdict, NotSampled, NotValidator
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS, VERDICT_UNAVAILABLE
from trolly.chain.proto import market_pb2 as pb

COLLATERAL = 4 * REWARD


def verdict(task_id, item, value, evidence=b"e" * 32, operator=None):
    if operator is None:
        return pb.MsgSubmitVerdict(task_id=task_id, round=item["round"], worker=decode_address(item["worker"]),
                                   segment=item["segment"], verdict=value, evidence_hash=evidence,
                                   replay_commitment=b"c" * 32)
    return verdict_message(operator, task_id, item, value, evidence)


def setup(make_chain, validators=3, stakes=None, **params):
    """A running two-worker task with round 0 committed and sampled; returns (chain, market, task id, items by
    worker), items being the segments awaiting verdicts."""
    chain = make_chain(accounts=3, validators=validators, stakes=stakes, params={"market": {**MARKET_PARAMS, **params}})
    market = Market(chain)
    task_id = market.open_task(workers=2, collateral=COLLATERAL)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    items: dict[str, list[dict]] = {}
    for item in market.to_verify(chain.operators[0]):
        items.setdefault(item["worker"], []).append(item)
    return chain, market, task_id, items


def votes_block(chain, task_id, votes):
    """One block of (operator, item, verdict) votes; all must be accepted."""
    output = chain.block(*[chain.tx(op, verdict(task_id, item, value, operator=op)) for op, item, value in votes])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    return output


def reveal_all(chain, task_id, votes):
    output = chain.block(*[chain.tx(op, reveal_message(task_id, item)) for op, item, _ in votes])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    return output


def test_two_thirds_fail_slashes_drops_and_withholds_pay_while_the_task_goes_on(make_chain):
    chain, market, task_id, items = setup(make_chain)
    cheater, honest = [encode_address(w.address) for w in market.workers[:2]]
    ops = chain.operators
    supply = get_supply(chain.state)
    cheater_balance = chain.balance(market.workers[0])
    voter_balances = [chain.holdings(op) for op in ops]

    bad = items[cheater][0]
    votes = [(ops[0], bad, VERDICT_FAIL), (ops[1], bad, VERDICT_FAIL)]
    votes += [(op, item, VERDICT_PASS) for item in items[honest] for op in ops[:2]]
    output = votes_block(chain, task_id, votes)

    slash = event_actions(output, "slash")
    assert len(slash) == 1 and slash[0]["worker"] == cheater and slash[0]["amount"] == str(COLLATERAL)
    to_verifiers = COLLATERAL * 5_000 // 10_000
    assert get_supply(chain.state) == supply - (COLLATERAL - to_verifiers)  # the rest is burned
    assert chain.balance(market.workers[0]) == cheater_balance  # nothing back, nothing paid
    view = market.task(task_id)
    members = {m["worker"]: m for m in view["members"]}
    assert members[cheater]["status"] == "slashed" and members[cheater]["paid"] == 0
    assert members[honest]["status"] == "active" and members[honest]["paid"] == REWARD // 2  # equal samples
    assert view["active_members"] == 1 and view["round"] == 1 and view["phase"] == "commit"
    # The two FAIL voters' shares of the slash (equal power: half each) are held until their reveals, like the
    # verifier fee; only the validator fee is paid at once.
    gains = [chain.holdings(op) - b for op, b in zip(ops, voter_balances)]
    pay = REWARD // 2
    validator_fee, verifier_fee = pay * 200 // 10_000, pay * 300 // 10_000
    # Distribution splits the validator fee by power (equal here; remainder by address order in staking).
    assert gains[0] + gains[1] + gains[2] == validator_fee
    assert gains[2] < validator_fee  # the third validator did not vote: only its part of the validator fee
    assert market.round_commitments(task_id, 0)[cheater]["outcome"] == "failed"

    # The task carries on with the honest worker alone.
    market.commit(task_id, 1, market.workers[1:2])
    assert market.task(task_id)["phase"] == "sampling"
    # Every voter reveals its replay digest; when the window closes the honest worker's PASS voters share the fee
    # and each FAIL voter is paid its share of the slash.
    reveal_all(chain, task_id, votes)
    outputs = chain.advance(10)
    gains = [chain.holdings(op) - b for op, b in zip(ops, voter_balances)]
    assert gains[0] + gains[1] + gains[2] == to_verifiers + validator_fee + verifier_fee
    paid = [(a["validator"], a["amount"]) for o in outputs for a in event_actions(o, "slash_share_paid")]
    assert sorted(paid) == sorted((encode_address(op.address), str(to_verifiers // 2)) for op in ops[:2])


def test_minority_fail_does_not_slash(make_chain):
    chain, market, task_id, items = setup(make_chain)
    worker = encode_address(market.workers[0].address)
    ops = chain.operators
    votes = [(ops[0], item, VERDICT_FAIL) for item in items[worker]]
    votes += [(op, item, VERDICT_PASS) for item in items[worker] for op in ops[1:]]
    other = encode_address(market.workers[1].address)
    votes += [(op, item, VERDICT_PASS) for item in items[other] for op in ops[:2]]
    output = votes_block(chain, task_id, votes)
    assert event_actions(output, "slash") == []
    assert market.round_commitments(task_id, 0)[worker]["outcome"] == "passed"
    assert {m["worker"]: m["status"] for m in market.task(task_id)["members"]}[worker] == "active"


def test_unavailable_counts_with_fail_toward_two_thirds(make_chain):
    chain, market, task_id, items = setup(make_chain)
    worker = encode_address(market.workers[0].address)
    item = items[worker][0]
    output = votes_block(chain, task_id, [(chain.operators[0], item, VERDICT_FAIL),
                                          (chain.operators[1], item, VERDICT_UNAVAILABLE)])
    decided = event_actions(output, "segment_decided")
    assert decided[0]["decision"] == "fail" and decided[0]["outcome"] == "failed"


def test_power_weighted_two_thirds(make_chain):
    """Powers 10, 5, 5: the big validator alone (1/2) decides nothing; with one small one (3/4) it decides."""
    chain, market, task_id, items = setup(make_chain, stakes=[10 * 10**6, 5 * 10**6, 5 * 10**6])
    worker = encode_address(market.workers[0].address)
    item = items[worker][0]
    output = votes_block(chain, task_id, [(chain.operators[0], item, VERDICT_PASS)])
    assert event_actions(output, "segment_decided") == []
    output = votes_block(chain, task_id, [(chain.operators[1], item, VERDICT_PASS)])
    assert event_actions(output, "segment_decided")[0]["decision"] == "pass"


def test_exactly_two_thirds_decides(make_chain):
    """3 * votes >= 2 * total: powers 2 and 1, the power-2 validator alone holds exactly two thirds."""
    chain, market, task_id, items = setup(make_chain, validators=2, stakes=[2 * 10**6, 1 * 10**6])
    item = next(iter(items.values()))[0]
    output = votes_block(chain, task_id, [(chain.operators[0], item, VERDICT_FAIL)])
    assert event_actions(output, "segment_decided")[0]["decision"] == "fail"


def test_verdicts_are_refused_from_non_validators_twice_or_off_sample(make_chain):
    chain, market, task_id, items = setup(make_chain, verification_window=50)
    item = next(iter(items.values()))[0]
    before = market_snapshot(chain)
    assert_fails(chain.deliver(chain.accounts[0], verdict(task_id, item, VERDICT_PASS)), NotValidator)
    assert_fails(chain.deliver(market.workers[0], verdict(task_id, item, VERDICT_FAIL)), NotValidator)
    off_sample = dict(item, segment=99)
    assert_fails(chain.deliver(chain.operators[0], verdict(task_id, off_sample, VERDICT_PASS)), NotSampled)
    assert_fails(chain.deliver(chain.operators[0], verdict(task_id, dict(item, round=1), VERDICT_PASS)), NotSampled)
    assert_fails(chain.deliver(chain.operators[0], verdict(task_id, item, 0)), InvalidVerdict)
    assert_fails(chain.deliver(chain.operators[0], verdict(task_id, item, VERDICT_PASS, evidence=b"short")),
                 InvalidVerdict)
    assert market_snapshot(chain) == before

    assert chain.deliver(chain.operators[0], verdict(task_id, item, VERDICT_PASS)).ok
    after_first = market_snapshot(chain)
    assert_fails(chain.deliver(chain.operators[0], verdict(task_id, item, VERDICT_FAIL)), DuplicateVerdict)
    assert market_snapshot(chain) == after_first
    # Once decided, a segment counts no more verdicts: a late one is accepted (the rest of its transaction
    # still counts) and recorded nowhere.
    assert chain.deliver(chain.operators[1], verdict(task_id, item, VERDICT_PASS)).ok
    late = chain.deliver(chain.operators[2], verdict(task_id, item, VERDICT_PASS))
    assert late.ok and [dict(e.attributes)["action"] for e in late.events if e.type == "task"] == ["verdict_late"]
    voters = {v["validator"] for v in market.round_commitments(task_id, 0)[item["worker"]]["verdicts"]
              if v["segment"] == item["segment"]}
    assert encode_address(chain.operators[2].address) not in voters


def test_a_late_verdict_does_not_undo_the_others_of_its_transaction(make_chain):
    """A validator's round of verdicts in one transaction: one segment decided by others meanwhile does not
    refuse the whole transaction."""
    chain, market, task_id, items = setup(make_chain, verification_window=50)
    worker, other = list(items)
    first = items[worker][0]
    votes_block(chain, task_id, [(op, first, VERDICT_FAIL) for op in chain.operators[:2]])  # worker's round fails
    batch = [verdict(task_id, item, VERDICT_PASS, operator=chain.operators[2]) for item in items[worker] + items[other]]
    result = chain.deliver(chain.operators[2], *batch)
    assert result.ok, result.log
    voters = {(v["validator"], v["segment"]) for v in market.round_commitments(task_id, 0)[other]["verdicts"]}
    assert all((encode_address(chain.operators[2].address), i["segment"]) in voters for i in items[other])


def test_undecided_workers_are_unverified_when_the_window_closes(make_chain):
    chain, market, task_id, items = setup(make_chain)
    worker = encode_address(market.workers[0].address)
    balance = chain.balance(market.workers[0])
    votes_block(chain, task_id, [(chain.operators[0], items[worker][0], VERDICT_FAIL)])  # a lone minority vote
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    settled = [a for o in outputs for a in event_actions(o, "round_settled")]
    assert settled == [{"id": str(task_id), "action": "round_settled", "round": "0", "passed": "0", "failed": "0",
                        "unverified": "2", "start_weights_hash": ""}]
    view = market.task(task_id)
    assert view["paid_workers"] == 0 and view["active_members"] == 2 and view["round"] == 1
    assert chain.balance(market.workers[0]) == balance
    assert market.to_verify(chain.operators[1]) == []


def test_window_close_retallies_with_current_powers(make_chain):
    """One of two equal validators votes PASS (half the power: undecided); the other then unbonds, so at the
    window's close the PASS votes hold all the power and the round passes instead of staying unverified."""
    from trolly.chain.proto.staking_pb2 import MsgUnbond
    from trolly.chain.validators import total_power

    chain, market, task_id, items = setup(make_chain, validators=2)
    voter, leaver = chain.operators
    votes_block(chain, task_id, [(voter, item, VERDICT_PASS) for worker in items.values() for item in worker])
    assert market.task(task_id)["phase"] == "verify"
    assert chain.deliver(leaver, MsgUnbond(amount=10 * 10**6)).ok
    assert total_power(chain.state) == 10
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    settled = [a for o in outputs for a in event_actions(o, "round_settled")]
    assert (settled[0]["passed"], settled[0]["unverified"]) == ("2", "0")
    assert market.task(task_id)["paid_workers"] == REWARD


def test_a_jailed_validator_can_no_longer_vote(make_chain):
    from trolly.chain.block import Misbehavior
    from trolly.chain.validators import consensus_address_of

    chain, market, task_id, items = setup(make_chain, validators=2, verification_window=50)
    jailed = chain.operators[1]
    evidence = Misbehavior(kind=1, validator_address=consensus_address_of(chain.consensus_keys[1].pubkey), power=10,
                           height=chain.height, time_ns=chain.height * 10**9, total_voting_power=20)
    chain.block(misbehavior=(evidence,))
    item = next(iter(items.values()))[0]
    assert_fails(chain.deliver(jailed, verdict(task_id, item, VERDICT_FAIL)), NotValidator)
    # The remaining validator now holds all the power: its vote alone decides.
    output = votes_block(chain, task_id, [(chain.operators[0], item, VERDICT_PASS)])
    assert event_actions(output, "segment_decided")[0]["decision"] == "pass"


def test_a_validator_that_is_also_a_worker_cannot_judge_its_own_segments(make_chain):
    from trolly.chain.market.errors import SelfVerdict

    chain = make_chain(accounts=2, validators=2, params={"market": MARKET_PARAMS})
    market = Market(chain)
    market.workers = [chain.accounts[1], chain.operators[1]]  # validator 1's operator also works
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers)
    chain.block()
    mine = encode_address(chain.operators[1].address)
    assert all(i["worker"] != mine for i in market.to_verify(chain.operators[1]))
    own = [i for i in market.to_verify(chain.operators[0]) if i["worker"] == mine]
    assert own
    assert_fails(chain.deliver(chain.operators[1], verdict(task_id, own[0], VERDICT_PASS)), SelfVerdict)
