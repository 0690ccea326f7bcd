"""A private task's data key on chain (issue 32 items 2 and 6): who may be delivered a box, when, and what
collecting one costs.

A key reaches a member only once the task runs (so leaving can no longer return everything it staked: a member
holding its box forfeits its whole collateral by leaving) and a validator only once it is drawn onto one of the
task's committees; every private task commits to a key of its own; a box is delivered once, with the sender's
proof; a full private task starts at its last join, whatever the validators hold.
"""

from __future__ import annotations

import nacl.signing
import pytest

from key_helpers import (COLLATERAL, DATA_KEY, KEY_PARAMS, PRIVATE_ROUND_BLOCKS, deliver, deliver_message, key_market,
                         new_key, private_spec, running_private_task, sealed_for, sign_something,
                         submit_private)
from market_helpers import Market, assert_fails, commit_message, submit_message
from trolly.chain.crypto import encode_address
from trolly.chain.errors import InvalidBoxProof, InvalidRequest
from trolly.chain.market.data_keys import data_key_hash
from trolly.chain.market.errors import (BudgetTooLow, DataKeyReused, InvalidDataKeyHash, InvalidSpec, InvalidTerms,
                                        KeyAlreadyDelivered, NotKeyRecipient, NotRequester, TaskNotStarted)
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.data.encryption import DataKeyError, open_data_key


@pytest.fixture
def market(make_chain) -> Market:
    return key_market(make_chain)


def test_a_member_is_given_no_key_before_the_start_so_join_receive_leave_refunds_nothing(market):
    """Attack (issue 32 item 2): join a private task, receive and open its key, leave before the start with the
    whole collateral back, join again. Now the chain takes no box for a member of an open task."""
    market.register()
    task_id = submit_private(market)
    worker = market.workers[0]
    before = market.chain.balance(worker)
    market.join(task_id, [worker])
    output = deliver(market, task_id, [worker])
    assert_fails(output.tx_results[0], TaskNotStarted)
    assert market.chain.deliver(worker, pb.MsgLeaveTask(task_id=task_id)).ok
    assert market.chain.balance(worker) == before  # the collateral back, and no key went with it
    with pytest.raises(Exception, match="no data key"):
        sealed_for(market, task_id, worker)


def test_leaving_after_receiving_the_key_forfeits_the_whole_collateral(market):
    """Attack (issue 32 item 2): collect the key, then leave for the collateral. Once a member holds its box,
    leaving before the task ends forfeits all of it (burned), not the missed-round penalty."""
    task_id, workers = running_private_task(market)
    assert market.task(task_id)["status"] == "running"
    assert all(r.ok for r in deliver(market, task_id, workers).tx_results)
    leaver, stayer = workers
    before = market.chain.balance(leaver)
    assert market.chain.deliver(leaver, pb.MsgLeaveTask(task_id=task_id)).ok
    assert market.chain.balance(leaver) == before
    assert market.member(task_id, leaver)["penalized"] == COLLATERAL
    assert market.member(task_id, stayer)["collateral"] == COLLATERAL


def test_a_member_that_asked_to_leave_with_a_commitment_forfeits_at_settlement(market):
    task_id, workers = running_private_task(market)
    deliver(market, task_id, workers)
    leaver = workers[0]
    market.commit(task_id, 0, [leaver])
    before = market.chain.balance(leaver)
    assert market.chain.deliver(leaver, pb.MsgLeaveTask(task_id=task_id)).ok  # leaves when round 0 settles
    market.commit(task_id, 0, workers[1:])
    sign_something(market, *market.chain.operators)
    market.chain.block()  # sampled
    deliver(market, task_id, market.chain.operators)
    market.vote(market.chain.operators, task_id)
    assert market.member(task_id, leaver)["status"] == "left"
    paid = market.member(task_id, leaver)["paid"]
    assert paid > 0 and market.chain.balance(leaver) == before + paid  # paid for its round, collateral forfeited


def test_an_unsampled_validator_cannot_be_delivered_a_key(market):
    """Attack (issue 32 item 2): every bonded validator got every key, and a validator needs 1 TRL. Now a
    validator gets a box only once drawn onto a committee of one of the task's segments."""
    task_id, workers = running_private_task(market)
    validator = market.chain.operators[0]
    sign_something(market, validator)
    assert_fails(deliver(market, task_id, [validator]).tx_results[0], NotKeyRecipient)
    deliver(market, task_id, workers)
    market.commit(task_id, 0, workers)
    market.chain.block()  # the sampling block draws the committees
    drawn = {address for item in market.task(task_id)["round_details"][0]["commitments"]
             for committee in item["committees"] for address in committee}
    assert encode_address(validator.address) in drawn
    assert deliver(market, task_id, [validator]).tx_results[0].ok
    recipients = market.chain.query(f"/market/key_recipients/{task_id}")["recipients"]
    assert {r["role"] for r in recipients} == {"member", "validator"}


def test_a_key_hash_an_earlier_task_used_is_refused(market):
    """Attack (issue 32 item 2): re-submitting a pack reused its key, so one collected key opened every later
    task's data. The chain takes each data key hash once."""
    market.register()
    submit_private(market)
    assert_fails(market.chain.deliver(market.requester, submit_message(
        spec=private_spec(), round_blocks=PRIVATE_ROUND_BLOCKS, data_key_hash=data_key_hash(DATA_KEY))), DataKeyReused)
    submit_private(market, new_key())  # a fresh key is accepted


def test_a_private_task_must_commit_to_its_key_and_a_public_one_to_none(market):
    refusals = [submit_message(spec=private_spec(), round_blocks=PRIVATE_ROUND_BLOCKS),
                submit_message(data_key_hash=data_key_hash(new_key())),
                submit_message(spec=private_spec(), round_blocks=PRIVATE_ROUND_BLOCKS, data_key_hash=b"\x01" * 31)]
    for message in refusals:
        assert_fails(market.chain.deliver(market.requester, message), InvalidDataKeyHash)
    too_short = submit_message(spec=private_spec(), round_blocks=KEY_PARAMS["key_delivery_blocks"],
                               data_key_hash=data_key_hash(new_key()))
    assert_fails(market.chain.deliver(market.requester, too_short), InvalidTerms)


def test_a_private_budget_covers_its_key_reserve(market):
    cost = 2 * (1_000_000 + 20_000 + 30_000)  # two rounds of reward and fees
    message = submit_message(spec=private_spec(), round_blocks=PRIVATE_ROUND_BLOCKS, collateral=COLLATERAL,
                             budget=cost, data_key_hash=data_key_hash(new_key()))
    assert_fails(market.chain.deliver(market.requester, message), BudgetTooLow)


def test_a_full_private_task_starts_at_its_last_join_whatever_the_validators_hold(market):
    """Attack (issue 32 item 6): a private task waited for every bonded validator's key, and stalled until it
    expired when the last one missing unbonded (the start was checked only on a join or a delivery). Now it
    starts when full; keys follow the start."""
    task_id, workers = running_private_task(market)
    view = market.task(task_id)
    assert view["status"] == "running" and view["started_height"] > 0
    assert view["private_data"] and view["data_key_hash"] == data_key_hash(DATA_KEY).hex()


def test_each_recipient_opens_its_own_box_and_no_other(market):
    task_id, workers = running_private_task(market)
    deliver(market, task_id, workers)
    first, second = (nacl.signing.SigningKey(w.seed) for w in workers)
    assert open_data_key(sealed_for(market, task_id, workers[0]), first) == DATA_KEY
    with pytest.raises(DataKeyError, match="sealed to another member"):
        open_data_key(sealed_for(market, task_id, workers[0]), second)


def test_a_box_is_delivered_once_only_by_the_requester_only_to_members(market):
    task_id, workers = running_private_task(market)
    assert_fails(deliver(market, task_id, workers[:1], sender=workers[1]).tx_results[0], NotRequester)
    outsider = market.workers[2]  # registered, not a member
    assert_fails(deliver(market, task_id, [outsider]).tx_results[0], NotKeyRecipient)
    assert deliver(market, task_id, workers[:1]).tx_results[0].ok
    assert_fails(deliver(market, task_id, workers[:1], key=new_key()).tx_results[0], KeyAlreadyDelivered)


def test_any_80_bytes_are_no_box_any_more(market):
    """Attack (issue 32 item 3): MsgDeliverKey accepted any 80 bytes. Now a box comes with its sender's proof
    that it knows the box's ephemeral secret, checked against the recipient's recorded key."""
    task_id, workers = running_private_task(market)
    message = pb.MsgDeliverKey(task_id=task_id, recipient=workers[0].address, sealed_key=b"\x07" * 80,
                               sender_proof=b"\x01" * 64)
    assert_fails(market.chain.deliver(market.requester, message), InvalidBoxProof)
    copied = deliver_message(task_id, workers[1])  # a good box and proof for another recipient
    copied.recipient = workers[0].address
    assert_fails(market.chain.deliver(market.requester, copied), InvalidBoxProof)
    short = pb.MsgDeliverKey(task_id=task_id, recipient=workers[0].address, sealed_key=b"\x01" * 79,
                             sender_proof=b"\x01" * 64)
    assert_fails(market.chain.deliver(market.requester, short), InvalidRequest)


def test_a_replacement_is_keyed_after_it_joins(market):
    task_id, workers = running_private_task(market, rounds=4, spec=private_spec(rounds=4))
    deliver(market, task_id, workers)
    assert market.chain.deliver(workers[0], pb.MsgLeaveTask(task_id=task_id)).ok
    market.commit(task_id, 0, workers[1:])
    sign_something(market, *market.chain.operators)
    market.chain.block()  # sampled
    deliver(market, task_id, market.chain.operators)
    market.vote(market.chain.operators, task_id)  # round 0 settles, the slot opens with round 1
    replacement = market.workers[2]
    market.join(task_id, [replacement])
    assert deliver(market, task_id, [replacement]).tx_results[0].ok
    market.commit(task_id, 1, [workers[1]])
    assert market.chain.deliver(replacement, commit_message(task_id, 2, "r")).code != 0  # not before its round


def test_a_public_task_has_no_key(market):
    task_id = market.open_task(workers=2)
    assert_fails(deliver(market, task_id, market.workers[:1]).tx_results[0], InvalidRequest)
    assert market.chain.query(f"/market/key_recipients/{task_id}")["recipients"] == []


def test_a_spec_naming_another_cipher_is_refused(market):
    result = market.chain.deliver(market.requester, submit_message(spec=private_spec("aes-ecb")))
    assert_fails(result, InvalidSpec)

