"""`trolly-wallet tx gov submit-proposal|deposit|vote` and `query proposals|proposal|tally` against a fake node that
runs the real chain rules: a proposal through its deposit, vote and tally, `-o json` and `--generate-only` like
every other transaction, and bad input refused with the documented exit codes."""

from __future__ import annotations

import pytest

from trolly.chain.hd import DEV_MNEMONIC
from trolly.wallet.keyring import WEAKEST_ACCEPTED, Keyring
from trolly.wallet.passwords import PasswordSource

from wallet_cli_helpers import fails_with, hermetic, invoke_wallet, ok_json
from wallet_helpers import DEV_STAKE, FakeNode, dev_app_state

PASSWORD = "wallet-password-1"
GOV = {"min_deposit": 2_000_000, "max_deposit_blocks": 400, "voting_period_blocks": 120}
"""The fake node makes a block every 50 ms: a vote of 120 blocks leaves a few seconds for the commands."""


@pytest.fixture
def gov_node():
    state = dev_app_state()
    state["params"]["gov"] = GOV
    node = FakeNode(state).start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def wallet(tmp_path, gov_node, monkeypatch):
    hermetic(monkeypatch)
    home = tmp_path / "wallet-home"
    Keyring(home, "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).initialize()

    def run(*args, input=None, node=gov_node):
        env = {"TROLLY_WALLET_HOME": str(home), "TROLLY_WALLET_PASSWORD": PASSWORD}
        if node is not None:
            env["TROLLY_NODE"] = node.url
        return invoke_wallet(args, env, input)

    assert ok_json(run("keys", "add", "dev", "--recover", "-o", "json", input=DEV_MNEMONIC + "\n"))
    return run


def test_a_proposal_goes_from_deposit_to_vote_to_a_changed_param(wallet, gov_node):
    submitted = ok_json(wallet("tx", "gov", "submit-proposal", "--title", "cheaper validators",
                               "--change", "market.validator_fee_bps=300", "--deposit", "1trl", "--from", "dev",
                               "--yes", "-o", "json"))
    assert submitted["code"] == 0 and submitted["tx"]["total_spend"] == 1_000_000
    listed = ok_json(wallet("query", "proposals", "-o", "json"))
    assert [(p["id"], p["status"], p["changes"]) for p in listed] == [
        (1, "deposit_period", [{"section": "market", "key": "validator_fee_bps", "value": 300}])]
    assert ok_json(wallet("tx", "gov", "deposit", "1", "1trl", "--from", "dev", "--yes", "-o", "json"))["code"] == 0
    shown = ok_json(wallet("query", "proposal", "1", "-o", "json"))
    assert shown["status"] == "voting_period" and shown["deposits"][0]["amount"] == 2_000_000
    assert ok_json(wallet("tx", "gov", "vote", "1", "no", "--from", "dev", "--yes", "-o", "json"))["code"] == 0
    assert ok_json(wallet("tx", "gov", "vote", "1", "yes", "--from", "dev", "--yes", "-o", "json"))["code"] == 0
    live = ok_json(wallet("query", "tally", "1", "-o", "json"))
    assert (live["final"], live["tally"]["yes"], live["tally"]["no"]) == (False, DEV_STAKE, 0)
    assert "if it ended now: passed" in live["outcome"]
    gov_node.wait_blocks(shown["voting_end_height"] - gov_node.height + 1)
    final = ok_json(wallet("query", "tally", "1", "-o", "json"))
    assert final["final"] and final["status"] == "passed"
    assert ok_json(wallet("query", "params", "-o", "json"))["market"]["validator_fee_bps"] == 300
    text = wallet("query", "proposal", "1")
    assert text.exit_code == 0 and "market.validator_fee_bps=300" in text.stdout and "passed" in text.stdout
    assert "proved at height" in text.stdout


def test_a_node_answering_a_tampered_proposal_is_refused(wallet, gov_node):
    """Attack: the node rewrites a proposal's status (or its changes) in its answer, keeping the valid proof of the
    true record. `query proposal` refuses it with exit 11 and shows nothing; untampered, it shows the proof."""
    assert ok_json(wallet("tx", "gov", "submit-proposal", "--title", "t", "--change", "market.validator_fee_bps=300",
                          "--deposit", "1trl", "--from", "dev", "--yes", "-o", "json"))["code"] == 0
    shown = ok_json(wallet("query", "proposal", "1", "-o", "json"))
    assert shown["proof"]["verified"] and shown["proof"]["present"] and "status" in shown["proof"]["fields"]
    assert shown["proof"]["note"] == f"proved at height {shown['proof']['query_height']}"
    gov_node.tamper_answer = lambda path, answer: {**answer, "status": "passed"} \
        if path.startswith("/gov/proposal/") else answer
    refused = wallet("query", "proposal", "1")
    fails_with(refused, 11, "status differ from the proven record")
    assert refused.stdout == ""
    gov_node.tamper_answer = lambda path, answer: {**answer, "changes": []} \
        if path.startswith("/gov/proposal/") else answer
    fails_with(wallet("query", "proposal", "1"), 11, "changes differ from the proven record")


def test_gov_transactions_can_be_generated_offline(wallet):
    generated = ok_json(wallet("tx", "gov", "vote", "3", "no-with-veto", "--from", "dev", "--generate-only", "--yes",
                               "--chain-id", "trolly-fake", "--nonce", "4", "--fees", "0", "-o", "json", node=None))
    assert generated["body"]["messages"] == [{"type": "/trolly.gov.v1.MsgVote",
                                              "fields": {"proposal_id": "3", "option": "VOTE_OPTION_NO_WITH_VETO"}}]


def test_bad_gov_input_is_refused_before_signing_or_by_the_chain(wallet, gov_node):
    fails_with(wallet("tx", "gov", "submit-proposal", "--title", "t", "--change", "market.validator_fee_bps",
                      "--from", "dev", "--yes"), 1, "SECTION.KEY=VALUE")
    rejected = wallet("tx", "gov", "submit-proposal", "--title", "t", "--change", "market.no_such=1", "--from", "dev",
                      "--yes")
    fails_with(rejected, 9, "code 122")
    assert "has no param 'no_such'" in rejected.stderr
    fails_with(wallet("tx", "gov", "vote", "7", "yes", "--from", "dev", "--yes"), 9, "code 121")
    assert wallet("tx", "gov", "vote", "1", "maybe", "--from", "dev", "--yes").exit_code == 2
    fails_with(wallet("query", "tally", "5"), 12, "no proposal 5")
    assert gov_node.broadcasts == 2
