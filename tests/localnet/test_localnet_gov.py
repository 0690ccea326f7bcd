"""Governance on the 4-validator CometBFT localnet (issue 35, test c): a proposal that changes a market fee passes
by the validators' and a delegator's votes (validators of 40 and 30 TRL yes, validator-3 no; the requester, who
delegated 10 TRL to validator-3, votes yes and so overrides its validator's no for its own stake), every node
applies it at the same height, and the next task submitted records the new value; a proposal that only
validator-3 votes on (its 10 TRL and, inherited, its delegator's: 20 of 110) misses the quorum, changes nothing,
and its deposit is refunded (the anchor's default, `burn_vote_quorum` = 0). The localnet's gov preset votes for
30 blocks."""

from __future__ import annotations

import pytest

from trolly.chain.gov.store import NO, YES
from trolly.chain.hd import dev_key
from trolly.chain.proto import gov_pb2
from trolly.chain.proto.staking_pb2 import MsgDelegate
from trolly.localnet.home_layout import REQUESTER_INDEX

from dev_node import send_included
from localnet_helpers import cometbft_missing, four_validators, query, wait_until
from market_helpers import submit_message

pytestmark = pytest.mark.slow

if cometbft_missing():
    pytest.skip(f"needs CometBFT v0.38 (make setup installs it where Go exists): {cometbft_missing()}",
                allow_module_level=True)

REQUESTER = dev_key(REQUESTER_INDEX)
OPERATORS = [dev_key(i) for i in range(4)]  # stakes 40, 30, 20, 10 TRL
DEPOSIT = 1_000_000  # the localnet's gov.min_deposit: the vote starts with the submission
DELEGATED = 10_000_000  # the requester's delegation to validator-3


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    yield from four_validators(tmp_path_factory, "gov-localnet")


def submit(url: str, *changes: tuple[str, str, str]) -> int:
    message = gov_pb2.MsgSubmitProposal(title="localnet", initial_deposit=DEPOSIT, changes=[
        gov_pb2.ParamChange(section=s, key=k, value=v) for s, k, v in changes])
    outcome = send_included(url, REQUESTER, message)
    events = {e.type: e for e in outcome.included.events}
    assert "proposal_voting_started" in events
    return int(events["proposal_submitted"].get("proposal_id"))


def decided(url: str, proposal_id: int) -> dict:
    return wait_until(lambda: (lambda p: p if p["status"] not in ("deposit_period", "voting_period") else None)(
        query(url, f"/gov/proposal/{proposal_id}")), timeout=120, what=f"proposal {proposal_id} decided")


def test_a_fee_change_passes_by_the_validators_votes_and_the_next_task_uses_it(net):
    urls = [net.config.rpc_url(i) for i in range(4)]
    assert query(urls[0], "/params/market")["validator_fee_bps"] == 200
    send_included(urls[0], REQUESTER, MsgDelegate(validator=OPERATORS[3].address, amount=DELEGATED))
    proposal_id = submit(urls[0], ("market", "validator_fee_bps", "300"))
    for operator, option, url in zip(OPERATORS, (YES, YES, None, NO), urls):
        if option is not None:
            send_included(url, operator, gov_pb2.MsgVote(proposal_id=proposal_id, option=option))
    live = query(urls[2], f"/gov/tally/{proposal_id}")["tally"]  # the delegator's stake votes with validator-3
    assert (live["yes"], live["no"], live["total_bonded"]) == (70_000_000, 20_000_000, 110_000_000)
    send_included(urls[1], REQUESTER, gov_pb2.MsgVote(proposal_id=proposal_id, option=YES))
    live = query(urls[2], f"/gov/tally/{proposal_id}")["tally"]  # now its own vote counts for its own stake
    assert (live["yes"], live["no"], live["total_bonded"]) == (80_000_000, 10_000_000, 110_000_000)
    proposal = decided(urls[1], proposal_id)
    assert proposal["status"] == "passed" and proposal["final_tally"]["yes"] == 80_000_000
    assert proposal["final_tally"]["no"] == 10_000_000
    net.wait_for_height(proposal["voting_end_height"] + 1)
    assert all(query(url, "/params/market")["validator_fee_bps"] == 300 for url in urls)
    outcome = send_included(urls[3], REQUESTER, submit_message())
    task_id = int(next(e for e in outcome.included.events if e.type == "task").get("id"))
    assert query(urls[0], f"/market/task/{task_id}")["terms"]["validator_fee_bps"] == 300
    # Nobody joins it: once it expires its budget is back, and the requester's balance stays put for the next test.
    wait_until(lambda: query(urls[0], f"/market/task/{task_id}")["status"] == "expired", timeout=60,
               what="the task to expire")


def test_a_proposal_that_misses_quorum_changes_nothing_and_refunds_its_deposit(net):
    url = net.config.rpc_url(0)
    reveal_window = query(url, "/params/market")["reveal_window"]
    proposal_id = submit(url, ("market", "reveal_window", str(reveal_window - 1)))  # more would break a rule
    after_deposit = query(url, f"/account/{query(url, f'/gov/proposal/{proposal_id}')['proposer']}")["balance"]
    send_included(net.config.rpc_url(3), OPERATORS[3], gov_pb2.MsgVote(proposal_id=proposal_id, option=YES))
    proposal = decided(url, proposal_id)
    assert proposal["status"] == "rejected" and "quorum" in proposal["outcome"]
    assert (proposal["final_tally"]["yes"], proposal["final_tally"]["total_bonded"]) == (20_000_000, 110_000_000)
    assert query(url, "/params/market")["reveal_window"] == reveal_window
    balance = query(url, f"/account/{proposal['proposer']}")["balance"]
    assert balance == after_deposit + DEPOSIT
