"""Lazy verifiers found out: votes commit to a replay digest, revealed after the round settles; a missing or
disagreeing reveal loses the verifier fee (or a FAIL voter's held share of a slash) and `lazy_verifier_penalty`
of bonded stake."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, REWARD, Market, assert_fails, event_actions, market_snapshot
from market_helpers import digest, final_message, replay_digest, reveal_message, verdict_message
from test_market_rounds import at_the_final_report
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import InvalidReveal
from trolly.chain.market.records import VERDICT_PASS, VERDICT_UNAVAILABLE, VERDICT_FAIL
from trolly.chain.market.store import ESCROW
from trolly.chain.validators import get_validator

PENALTY = 2 * 10**6
REVEAL_WINDOW = 4
PARAMS = {**MARKET_PARAMS, "reveal_window": REVEAL_WINDOW, "lazy_verifier_penalty": PENALTY}
VERIFIER_FEE = (REWARD // 2) * 300 // 10_000  # per worker: two workers with equal samples


def setup(make_chain, validators=3):
    chain = make_chain(accounts=3, validators=validators, params={"market": PARAMS})
    market = Market(chain)
    task_id = market.open_task(workers=2, collateral=4 * REWARD)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    items = [i for i in market.to_verify(chain.operators[0])]
    return chain, market, task_id, items


def vote(chain, task_id, votes):
    output = chain.block(*[chain.tx(op, verdict_message(op, task_id, item, value, replayed=replayed))
                           for op, item, value, replayed in votes])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    return output


def reveal(chain, task_id, reveals):
    output = chain.block(*[chain.tx(op, reveal_message(task_id, item, replayed)) for op, item, replayed in reveals])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    return output


def stake(chain, operator) -> int:
    return get_validator(chain.state, operator.address).stake


def test_honest_reveals_earn_the_held_fee_and_a_missing_one_loses_it_and_pays_the_penalty(make_chain):
    chain, market, task_id, items = setup(make_chain)
    honest, lazy = chain.operators[:2]
    vote(chain, task_id, [(op, item, VERDICT_PASS, None) for item in items for op in (honest, lazy)])
    view = market.task(task_id)
    assert view["round"] == 1 and view["paid_workers"] == REWARD  # workers are paid at once
    assert chain.balance(ESCROW) > 0
    balances = {op.address: chain.balance(op) for op in (honest, lazy)}
    stakes = {op.address: stake(chain, op) for op in (honest, lazy)}

    reveal(chain, task_id, [(honest, item, None) for item in items])  # the lazy one cannot: it never replayed
    outputs = chain.advance(REVEAL_WINDOW)
    lazy_events = [a for o in outputs for a in event_actions(o, "lazy_verifier")]
    assert {a["validator"] for a in lazy_events} == {encode_address(lazy.address)}
    assert len(lazy_events) == len(items) and all(a["penalty"] == str(PENALTY) for a in lazy_events)
    assert chain.balance(honest) - balances[honest.address] >= 2 * VERIFIER_FEE  # both workers' fees, whole
    assert chain.balance(lazy) - balances[lazy.address] < 2 * VERIFIER_FEE  # only its validator-fee share
    assert stake(chain, lazy) == stakes[lazy.address] - len(items) * PENALTY
    assert stake(chain, honest) == stakes[honest.address]


def committee_votes(chain, market, task_id, verdict=VERDICT_PASS):
    """(operator, item, verdict, None) for every member of every sampled segment's committee in round 0."""
    by_address = {encode_address(op.address): op for op in chain.operators}
    votes = []
    for worker, commitment in market.round_commitments(task_id, 0).items():
        for segment, committee in zip(commitment["segments"], commitment["committees"]):
            item = {"worker": worker, "round": 0, "segment": segment}
            votes += [(by_address[member], item, verdict, None) for member in committee]
    return votes


def committees_of_three(make_chain):
    """Four validators, a two-worker task whose round 0 is committed and sampled for committees of three:
    (chain, market, task id, the committees' PASS votes as `committee_votes` gives them)."""
    chain = make_chain(accounts=3, validators=4, params={"market": {**PARAMS, "committee_size": 3}})
    market = Market(chain)
    task_id = market.open_task(workers=2, collateral=4 * REWARD)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    return chain, market, task_id, committee_votes(chain, market, task_id)


def test_a_vote_committed_to_a_guessed_digest_disagrees_with_the_true_one_and_is_penalised(make_chain):
    """A committee of three (of four validators) votes PASS unanimously; two reveal the replay's digest, two thirds
    of the committee's power, which makes it the true one, and the third reveals a guess: it is lazy."""
    chain, market, task_id, votes = committees_of_three(make_chain)
    guess = b"g" * 32
    guesser, guessed = votes[0][0], votes[0][1]
    votes[0] = (guesser, guessed, VERDICT_PASS, guess)
    vote(chain, task_id, votes)
    assert market.task(task_id)["round"] == 1  # every committee voted, unanimously: decided at once
    reveal(chain, task_id, [(op, item, replayed) for op, item, _, replayed in votes])
    outputs = chain.advance(REVEAL_WINDOW)
    lazy = [a for o in outputs for a in event_actions(o, "lazy_verifier")]
    assert [(a["validator"], a["segment"]) for a in lazy] == [(encode_address(guesser.address),
                                                               str(guessed["segment"]))]


def test_an_unavailable_vote_replays_nothing_and_is_not_held_to_the_majority_digest(make_chain):
    chain, market, task_id, items = setup(make_chain)
    item = items[0]
    votes = [(chain.operators[0], item, VERDICT_FAIL, None), (chain.operators[1], item, VERDICT_UNAVAILABLE, b"u" * 32)]
    vote(chain, task_id, votes)
    chain.advance(MARKET_PARAMS["verification_window"])  # the other worker stays undecided: settled at the window
    reveal(chain, task_id, [(chain.operators[0], item, None), (chain.operators[1], item, b"u" * 32)])
    outputs = chain.advance(REVEAL_WINDOW)
    assert [a for o in outputs for a in event_actions(o, "lazy_verifier")] == []


def test_reveals_are_refused_before_settlement_twice_with_the_wrong_salt_after_the_deadline_or_without_a_vote(make_chain):
    chain, market, task_id, items = setup(make_chain)
    voter, other = chain.operators[:2]
    item = items[0]
    vote(chain, task_id, [(voter, item, VERDICT_PASS, None)])
    before = market_snapshot(chain)
    assert_fails(chain.deliver(voter, reveal_message(task_id, item)), InvalidReveal)  # the round is not settled
    assert market_snapshot(chain) == before

    vote(chain, task_id, [(op, i, VERDICT_PASS, None) for i in items for op in (voter, other) if (op, i) != (voter, item)])
    assert market.task(task_id)["round"] == 1
    assert_fails(chain.deliver(chain.operators[2], reveal_message(task_id, item)), InvalidReveal)  # no vote
    assert_fails(chain.deliver(voter, reveal_message(task_id, item, replayed=b"x" * 32)), InvalidReveal)
    assert chain.deliver(voter, reveal_message(task_id, item)).ok
    votes = market.round_commitments(task_id, 0)[item["worker"]]["verdicts"]
    assert [v["replay_digest"] for v in votes
            if v["validator"] == encode_address(voter.address) and v["segment"] == item["segment"]] == \
        [replay_digest(item).hex()]
    assert_fails(chain.deliver(voter, reveal_message(task_id, item)), InvalidReveal)  # twice
    chain.advance(REVEAL_WINDOW)
    late = chain.deliver(other, reveal_message(task_id, item))
    assert_fails(late, InvalidReveal)  # too late
    assert "closed at height" in late.log and "votes are deleted" in late.log


def test_fees_held_when_a_task_ends_are_paid_when_the_reveal_window_closes(make_chain):
    from trolly.chain.proto import market_pb2 as pb

    from market_helpers import spec_bytes

    chain = make_chain(accounts=3, validators=3, params={"market": PARAMS})
    market = Market(chain)
    task_id = market.open_task(workers=2, collateral=4 * REWARD, rounds=1, spec=spec_bytes(rounds=1))
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    items = market.to_verify(chain.operators[0])
    ops = chain.operators[:2]
    vote(chain, task_id, [(op, item, VERDICT_PASS, None) for item in items for op in ops])
    assert chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id)).ok  # ends now: the final report
    assert market.task(task_id)["status"] == "cancelled"
    balances = [chain.balance(op) for op in ops]
    reveal(chain, task_id, [(op, item, None) for item in items for op in ops])
    chain.advance(REVEAL_WINDOW)
    gains = [chain.balance(op) - b for op, b in zip(ops, balances)]
    assert sum(gains) >= 2 * VERIFIER_FEE


def test_a_lazy_verifier_that_unbonds_before_its_reveal_deadline_is_penalised_from_its_unbonding_stake(make_chain):
    from trolly.chain.accounts import get_supply
    from trolly.chain.proto.staking_pb2 import MsgUnbond
    from trolly.chain.unbonding import unbonding_entries_of
    from trolly.chain.validators import UNBONDING_POOL

    chain, market, task_id, items = setup(make_chain)
    honest, lazy = chain.operators[:2]
    vote(chain, task_id, [(op, item, VERDICT_PASS, None) for item in items for op in (honest, lazy)])
    bonded = stake(chain, lazy)
    assert chain.deliver(lazy, MsgUnbond(amount=bonded)).ok  # all of it, before the reveal deadline
    assert stake(chain, lazy) == 0
    supply, pool = get_supply(chain.state), chain.balance(UNBONDING_POOL)

    reveal(chain, task_id, [(honest, item, None) for item in items])
    outputs = chain.advance(REVEAL_WINDOW)
    lazy_events = [a for o in outputs for a in event_actions(o, "lazy_verifier")]
    assert [a["penalty"] for a in lazy_events] == [str(PENALTY)] * len(items)
    burned = len(items) * PENALTY
    missed = sum(int(a["penalty"]) for o in outputs for a in event_actions(o, "dropped"))  # round 1 went uncommitted
    assert get_supply(chain.state) == supply - burned - missed
    assert chain.balance(UNBONDING_POOL) == pool - burned
    assert [e.amount for e in unbonding_entries_of(chain.state, lazy.address)] == [bonded - burned]


def test_an_unbonding_entry_from_before_the_vote_is_not_penalised(make_chain):
    from trolly.chain.proto.staking_pb2 import MsgUnbond
    from trolly.chain.unbonding import unbonding_entries_of

    chain = make_chain(accounts=3, validators=3, params={"market": PARAMS})
    market = Market(chain)
    lazy = chain.operators[1]
    earlier = stake(chain, lazy) // 2
    assert chain.deliver(lazy, MsgUnbond(amount=earlier)).ok  # unbonded before it ever voted
    task_id = market.open_task(workers=2, collateral=4 * REWARD)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    items = market.to_verify(chain.operators[0])
    vote(chain, task_id, [(op, item, VERDICT_PASS, None) for item in items for op in chain.operators])
    later = stake(chain, lazy)
    assert chain.deliver(lazy, MsgUnbond(amount=later)).ok
    reveal(chain, task_id, [(op, item, None) for item in items for op in (chain.operators[0], chain.operators[2])])
    outputs = chain.advance(REVEAL_WINDOW)
    penalties = [int(a["penalty"]) for o in outputs for a in event_actions(o, "lazy_verifier")]
    assert len(items) * PENALTY > later and sum(penalties) == later  # all it unbonded since the vote, no more
    assert [e.amount for e in unbonding_entries_of(chain.state, lazy.address)] == [earlier]


def test_a_fail_voter_is_paid_its_share_of_a_slash_at_the_reveal_and_a_lazy_one_s_share_is_burned(make_chain):
    """Four FAIL voters (powers 20, 10, 10, 40 of 80) slash a cheater: their shares (half the collateral, by
    power) are held, not paid, until the reveal window closes; then the two whose reveals agree (60 of 80, two
    thirds of the deciding set: the true digest) are paid exactly their shares, and the shares of the one that
    revealed another digest and the one that revealed nothing are burned."""
    from trolly.chain.accounts import get_supply

    chain = make_chain(accounts=3, validators=4, stakes=[20 * 10**6] + [10 * 10**6] * 2 + [40 * 10**6],
                       params={"market": PARAMS})
    market = Market(chain)
    collateral = 4 * REWARD
    task_id = market.open_task(workers=2, collateral=collateral)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    items = market.to_verify(chain.operators[0])
    cheater = encode_address(market.workers[0].address)
    bad = next(item for item in items if item["worker"] == cheater)
    honest_items = [item for item in items if item["worker"] != cheater]
    revealer, guesser, silent, backer = chain.operators[:4]
    voters = (revealer, guesser, silent, backer)
    shares = {revealer: collateral // 8, guesser: collateral // 16, silent: collateral // 16,
              backer: collateral // 4}  # 50 % by power
    balances = {op: chain.balance(op) for op in voters}
    guess = b"g" * 32  # the guesser's FAIL vote commits to a digest it did not replay
    output = vote(chain, task_id, [(op, bad, VERDICT_FAIL, guess if op is guesser else None) for op in voters]
                  + [(op, item, VERDICT_PASS, None) for item in honest_items for op in voters])
    assert [(a["held_for_verifiers"], a["burned"]) for a in event_actions(output, "slash")] == \
        [(str(collateral // 2), str(collateral // 2))]
    validator_fee = (REWARD // 2) * 200 // 10_000
    assert sum(chain.balance(op) - balances[op] for op in voters) <= validator_fee  # no slash share paid yet
    balances, supply = {op: chain.balance(op) for op in voters}, get_supply(chain.state)

    reveal(chain, task_id, [(op, item, None) for item in [bad] + honest_items for op in (revealer, backer)]
           + [(guesser, bad, guess)] + [(guesser, item, None) for item in honest_items])
    outputs = chain.advance(REVEAL_WINDOW)
    paid = [(a["validator"], int(a["amount"])) for o in outputs for a in event_actions(o, "slash_share_paid")]
    burned = [(a["validator"], int(a["amount"])) for o in outputs for a in event_actions(o, "slash_share_burned")]
    assert sorted(paid) == sorted((encode_address(op.address), shares[op]) for op in (revealer, backer))
    assert sorted(burned) == sorted((encode_address(op.address), shares[op]) for op in (guesser, silent))
    # The revealer's gain is its share and a third of the honest worker's verifier fee (the guesser's PASS
    # reveals checked out, so it and the backer take the rest); the others are paid nothing of the slash.
    assert chain.balance(revealer) - balances[revealer] == shares[revealer] + VERIFIER_FEE // 3
    assert chain.balance(guesser) - balances[guesser] == VERIFIER_FEE // 3
    assert chain.balance(silent) == balances[silent]
    penalties = sum(int(a["penalty"]) for o in outputs
                    for a in event_actions(o, "lazy_verifier") + event_actions(o, "dropped"))
    assert get_supply(chain.state) == supply - shares[guesser] - shares[silent] - penalties


def test_slash_shares_held_when_a_final_report_ends_the_task_are_paid_when_the_reveal_window_closes(make_chain):
    """A forged final report is slashed in the block that completes the task; its FAIL voter's share stays held
    (the task's escrow is already refunded) and is paid once its reveal checks out at the deadline."""
    market, task_id = at_the_final_report(make_chain, workers=1)
    chain = market.chain
    voter = chain.operators[0]
    assert chain.block(chain.tx(market.workers[0], final_message(task_id, 1, digest("forged")))).tx_results[0].ok
    chain.block()  # the sampling block
    [report] = market.to_verify(voter)
    balance = chain.balance(voter)
    output = vote(chain, task_id, [(voter, report, VERDICT_FAIL, None)])
    [slash] = event_actions(output, "slash")
    held = int(slash["held_for_verifiers"])
    assert held > 0 and market.task(task_id)["status"] == "abandoned"  # its only member slashed
    assert chain.balance(voter) == balance and chain.balance(ESCROW) >= held
    reveal(chain, task_id, [(voter, report, None)])
    outputs = chain.advance(10)
    assert [(a["validator"], a["amount"]) for o in outputs for a in event_actions(o, "slash_share_paid")] == \
        [(encode_address(voter.address), str(held))]
    # Besides its share it gets only fee-collector rewards (round 0's verifier fees, its round-0 votes unrevealed):
    # its commission at once, the rest credited to its delegation.
    commission = sum(int(dict(e.attributes)["commission"]) for o in outputs for e in o.events if e.type == "reward")
    assert chain.balance(voter) == balance + held + commission


def test_a_minority_cannot_define_the_true_replay_digest(make_chain):
    """Attack (issue 32 item 1): the digest with the most power behind it was the true replay, so one voter of
    three (a quarter of the power) revealing a digest smaller than the honest one tied with the only honest
    revealer and won, making it look lazy. Now a digest needs two thirds of the deciding committee's power: with
    none, nobody is lazy for disagreeing, and only the missing reveal is."""
    chain, market, task_id, votes = committees_of_three(make_chain)
    item = votes[0][1]
    liar, honest, silent = [op for op, i, _, _ in votes if i == item]
    forged = b"\x00" * 32  # smaller than any honest digest: it won the old tie
    votes = [(op, i, v, forged if op is liar and i == item else None) for op, i, v, _ in votes]
    vote(chain, task_id, votes)
    assert market.task(task_id)["round"] == 1
    reveals = [(op, i, forged if op is liar and i == item else None) for op, i, _, _ in votes
               if not (op is silent and i == item)]
    reveal(chain, task_id, reveals)
    outputs = chain.advance(REVEAL_WINDOW)
    lazy = {(a["validator"], a["segment"]) for o in outputs for a in event_actions(o, "lazy_verifier")}
    assert lazy == {(encode_address(silent.address), str(item["segment"]))}


def test_gpu_and_cpu_replays_of_one_segment_are_never_compared(make_chain):
    """A GPU segment before the whole set (its only declarer left holds too little power): the CPU replayers agree
    on their digest with two thirds of the power, which makes it their kind's true digest; the declarer's bitwise
    digest differs, is of the other kind, and is not judged by it (its FAIL still lost, and pays for that)."""
    from trolly.chain.proto import market_pb2 as pb

    from market_helpers import commit_message

    h100 = "gpu-NVIDIA-H100-80GB-HBM3+driver-550.54.15+cuda-12.4"
    chain = make_chain(accounts=3, validators=4, stakes=[1_000_000] + [10 * 10**6] * 3, params={"market": PARAMS})
    market = Market(chain)
    declarer, withdrawer, *others = chain.operators
    for operator in (declarer, withdrawer):
        assert chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=[h100])).ok  # 11 of 31: more than a third
    task_id = market.open_task(workers=2, collateral=4 * REWARD)
    profile = f"torch-2.13.0+cu130/threads-1/isa-avx2/{h100}/deterministic-ftz"
    output = chain.block(*[chain.tx(w, commit_message(task_id, 0, w.address.hex(), determinism_profile=profile))
                           for w in market.workers[:2]])
    assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
    assert chain.deliver(withdrawer, pb.MsgDeclareReplayGpus()).ok  # 1 of 31 left: the whole set from the draw
    chain.block()
    items = market.to_verify(declarer)
    bitwise = b"b" * 32
    vote(chain, task_id, [(declarer, item, VERDICT_FAIL, bitwise) for item in items]
         + [(op, item, VERDICT_PASS, None) for item in items for op in (withdrawer, *others)])
    assert market.task(task_id)["round"] == 1
    commitment = next(iter(market.round_commitments(task_id, 0).values()))
    assert commitment["escalated"] == [1, 1]
    reveal(chain, task_id, [(declarer, item, bitwise) for item in items]
           + [(op, item, None) for item in items for op in (withdrawer, *others)])
    outputs = chain.advance(REVEAL_WINDOW)
    assert [a for o in outputs for a in event_actions(o, "lazy_verifier")] == []
    losing = {a["validator"] for o in outputs for a in event_actions(o, "losing_verdict")}
    assert losing == {encode_address(declarer.address)}
