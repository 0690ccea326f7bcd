"""Proofs of listings and of answers built from many keys, checked as the wallet checks them (`wallet.proofs`):
the node proves every key the answer read (`chain.query_reads`), a listing through its index record
(`chain.listing_index`), and the wallet recomputes the answer from the proven values alone.

Each attack is a node that answers with valid-looking proofs: a listing with an entry left out, a tampered value,
a proof left out, another key's proof, proofs of an older height. Before listing indexes, the wallet could not
tell a listing with a validator left out from the whole one (it proved each listed validator only).
"""

from __future__ import annotations

import pytest
from gov_helpers import SHORT_GOV, YES, Gov
from market_helpers import MARKET_PARAMS, submit_message
from proof_helpers import accepted, node_answer, with_value

from trolly.chain import keys
from trolly.chain.app import query
from trolly.chain.crypto import encode_address
from trolly.chain.proto import ics23_pb2 as ics23
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.chain.query_reads import RecordingReader
from trolly.chain.state import MemoryKV, State
from trolly.wallet.errors import ProofInvalid
from trolly.wallet.rpc_types import ProofOp


@pytest.fixture
def staked(make_chain):
    """Three validators; account 0 delegates to two of them."""
    chain = make_chain(accounts=2, validators=3)
    for operator in chain.operators[:2]:
        chain.block(chain.tx(chain.accounts[0], MsgDelegate(validator=operator.address, amount=2_000_000)))
    return chain


def test_the_validator_listing_is_proven_complete(staked):
    answer, ops, root = node_answer(staked.kv.items, "/validators")
    assert len(answer) == 3 and accepted("/validators", answer, ops, root) == ("entries",)


def test_a_listing_with_a_validator_left_out_is_refused(staked):
    """Attack: the node leaves a validator out of the listing, with or without its proof."""
    answer, ops, root = node_answer(staked.kv.items, "/validators")
    dropped = staked.operators[2].address
    shorter = [v for v in answer if v["operator"] != encode_address(dropped)]
    assert len(shorter) == 2
    with pytest.raises(ProofInvalid, match="entries differ"):
        accepted("/validators", shorter, ops, root)
    without_its_proof = [op for op in ops if op.key != keys.validator_key(dropped)]
    with pytest.raises(ProofInvalid, match="no proof covers"):
        accepted("/validators", shorter, without_its_proof, root)


def test_a_listing_index_rewritten_to_leave_an_entry_out_does_not_hold(staked):
    """Attack: the node shortens the index record itself, so that a listing without a validator looks whole."""
    answer, ops, root = node_answer(staked.kv.items, "/validators")
    index = next(op for op in ops if op.key == keys.listing_index_key(keys.VALIDATOR))
    shortened = ics23.CommitmentProof.FromString(index.data).exist.value[20:]
    forged = [with_value(op, shortened) if op is index else op for op in ops]
    with pytest.raises(ProofInvalid, match="does not lead to the app hash"):
        accepted("/validators", answer[1:], forged, root)


def test_a_tampered_record_or_another_keys_proof_is_refused(staked):
    """Attacks: a validator's record proven with another value; a proof of one key sent as another's."""
    answer, ops, root = node_answer(staked.kv.items, "/validators")
    record = next(op for op in ops if op.key[:1] == b"\x10")
    tampered = [with_value(op, b"\x00" + ics23.CommitmentProof.FromString(op.data).exist.value[1:])
                if op is record else op for op in ops]
    with pytest.raises(ProofInvalid, match="does not lead to the app hash"):
        accepted("/validators", answer, tampered, root)
    other = next(op for op in ops if op.key[:1] == b"\x10" and op.key != record.key)
    swapped = [ProofOp(op.type, other.key, record.data) if op is other else op for op in ops]
    with pytest.raises(ProofInvalid, match="another key"):
        accepted("/validators", answer, swapped, root)


def test_proofs_of_an_older_height_do_not_hold_against_a_newer_app_hash(staked):
    """Attack: the node answers with the state (and proofs) of a past height while the header is newer."""
    answer, ops, _ = node_answer(staked.kv.items, f"/delegations/{encode_address(staked.accounts[0].address)}")
    staked.block(staked.tx(staked.accounts[0], MsgDelegate(validator=staked.operators[2].address, amount=1_000_000)))
    _, _, newer_root = node_answer(staked.kv.items, "/validators")
    with pytest.raises(ProofInvalid, match="does not"):
        accepted(f"/delegations/{encode_address(staked.accounts[0].address)}", answer, ops, newer_root)


def test_a_delegators_delegations_and_rewards_are_proven_and_a_left_out_one_refused(staked):
    """Attack: the node leaves one of a delegator's delegations out, or inflates what one is worth."""
    path = f"/delegations/{encode_address(staked.accounts[0].address)}"
    answer, ops, root = node_answer(staked.kv.items, path)
    assert len(answer["delegations"]) == 2
    assert set(accepted(path, answer, ops, root)) == {"delegator", "delegations", "total"}
    with pytest.raises(ProofInvalid, match="delegations, total differ"):
        accepted(path, {**answer, "delegations": answer["delegations"][:1],
                        "total": answer["delegations"][0]["amount"]}, ops, root)
    inflated = [{**answer["delegations"][0], "amount": answer["delegations"][0]["amount"] + 1}]
    with pytest.raises(ProofInvalid, match="delegations differ"):
        accepted(path, {**answer, "delegations": inflated + answer["delegations"][1:]}, ops, root)
    rewards_path = f"/rewards/{encode_address(staked.accounts[0].address)}"
    rewards, reward_ops, root = node_answer(staked.kv.items, rewards_path)
    assert len(rewards["rewards"]) == 2 and "total" in accepted(rewards_path, rewards, reward_ops, root)


def test_a_live_tally_is_proven_from_every_vote_and_stake_and_a_tampered_one_refused(make_chain):
    """Attack: the node inflates the yes stake of a proposal still voting."""
    chain = make_chain(accounts=2, validators=3, params={"gov": SHORT_GOV})
    gov = Gov(chain)
    proposal_id = gov.submit(("market", "validator_fee_bps", 300))
    gov.vote_all(proposal_id, YES, voters=chain.operators[:2])
    path = f"/gov/tally/{proposal_id}"
    answer, ops, root = node_answer(chain.kv.items, path)
    assert answer["final"] is False and answer["tally"]["yes"] > 0
    assert "tally" in accepted(path, answer, ops, root)
    with pytest.raises(ProofInvalid, match="tally differ"):
        accepted(path, {**answer, "tally": {**answer["tally"], "yes": answer["tally"]["yes"] + 1}}, ops, root)
    votes, vote_ops, root = node_answer(chain.kv.items, f"/gov/votes/{proposal_id}")
    assert len(votes["votes"]) == 2 and accepted(f"/gov/votes/{proposal_id}", votes, vote_ops, root)
    with pytest.raises(ProofInvalid, match="votes differ"):
        accepted(f"/gov/votes/{proposal_id}", {**votes, "votes": votes["votes"][1:]}, vote_ops, root)
    listing, listing_ops, root = node_answer(chain.kv.items, "/gov/proposals")
    assert accepted("/gov/proposals", listing, listing_ops, root) == ("proposals",)


def test_task_listing_pages_and_params_are_proven(make_chain):
    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    for _ in range(3):
        assert chain.deliver(chain.accounts[0], submit_message()).ok
    for path in ("/market/tasks", "/market/tasks/open", "/market/tasks/after/1/limit/1", "/params"):
        answer, ops, root = node_answer(chain.kv.items, path)
        assert accepted(path, answer, ops, root)
    answer, ops, root = node_answer(chain.kv.items, "/market/tasks")
    with pytest.raises(ProofInvalid, match="tasks differ"):
        accepted("/market/tasks", {**answer, "tasks": answer["tasks"][1:]}, ops, root)


def test_a_scan_of_a_prefix_no_index_covers_is_named_and_no_query_makes_one(make_chain):
    """A read that lists a prefix with no listing index (every pending segment) is named as unindexed, so the node
    would answer it without a proof; the market's queries, `/market/verify` included, make no such read."""
    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    assert chain.deliver(chain.accounts[0], submit_message()).ok
    recorder = RecordingReader(MemoryKV(chain.kv.items))
    list(recorder.iterate(keys.MARKET_PENDING_SEGMENT))
    assert recorder.reads().unindexed == (keys.MARKET_PENDING_SEGMENT,)
    for path in ("/market/verify/" + encode_address(chain.operators[0].address), "/market/tasks"):
        recorder = RecordingReader(MemoryKV(chain.kv.items))
        query(State(recorder), path)
        assert recorder.reads().unindexed == (), path
