"""`trolly-worker leave TASK_ID` (docs/protocol.md 4.1c): what leaving would cost, said before anything is signed
(`leave_command.leave_effect`, on task views as the chain answers them), and the command against a real
`trolly-node dev`: an unknown task, a non-member and a refused confirmation end with `Error:` and a non-zero
exit, sending nothing; with `--yes` a member of an open task leaves with its collateral back."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner
from market_view_helpers import address, commitment_answer, member_answer, round_answer, task_answer

from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.hd import dev_key
from trolly.chain.proto import market_pb2
from trolly.compute.spec import example_spec
from trolly.compute.worker.cli import main
from trolly.compute.worker.config import WorkerConfig, save_config
from trolly.compute.worker.errors import LeaveRefused
from trolly.compute.worker.leave_command import leave_effect
from trolly.wallet.keyring import Keyring
from trolly.wallet.market_queries import get_market_params
from trolly.wallet.market_views import TaskView
from trolly.wallet.rpc import RpcClient
from trolly.wallet.tasks import plan_task
from trolly.wallet.txbuilder import send_message

from dev_node import dev_node, send_included

ME = address(2)
PENALTY_BPS = 1_000


def view_of(**changes) -> TaskView:
    answer = task_answer(**changes)
    answer["terms"] = {**answer["terms"], "missed_round_penalty_bps": PENALTY_BPS}
    return TaskView.from_answer(answer)


def test_leaving_before_committing_says_the_penalty_and_after_committing_waits_for_settlement():
    view = view_of(members=[member_answer(worker=ME, collateral=5_000)])
    assert "penalty of 500 utrl is burned and 4500 utrl" in leave_effect(view, ME)
    committed = view_of(members=[member_answer(worker=ME, collateral=5_000)],
                        round_details=[round_answer(round=0), round_answer(
                            round=1, commitments=[commitment_answer(worker=ME)])])
    assert committed.round == 1 and "when round 1 settles" in leave_effect(committed, ME)
    opened = view_of(status="open", phase="join", members=[member_answer(worker=ME, collateral=5_000)])
    assert "comes back in full" in leave_effect(opened, ME)


@pytest.mark.parametrize("changes, message", [
    ({"members": []}, "not a member"),
    ({"members": [member_answer(worker=ME, status="dropped", reason="missed round")]}, r"dropped \(missed round\)"),
    ({"members": [member_answer(worker=ME, leaving=1)]}, "already leaving"),
    ({"status": "completed", "phase": "done", "members": [member_answer(worker=ME)]}, "already ended"),
])
def test_leaving_is_refused_before_signing_when_the_chain_would_refuse_it(changes, message):
    with pytest.raises(LeaveRefused, match=message):
        leave_effect(view_of(**changes), ME)


def invoke(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input,
                              env={"TROLLY_WORKER_HOME": None, "TROLLY_WALLET_PASSWORD": None})


def open_task(url: str) -> int:
    """A task for two workers, so that one joining leaves it open."""
    spec = json.dumps(example_spec("ab" * 32, model={"arch": "mlp", "config": {"hidden": [16]}})).encode()
    with RpcClient(url, timeout=10) as client:
        plan = plan_task(spec, client.run(get_market_params(client.async_client)), 1_000_000, None, 2, 1, None)
    send_included(url, dev_key(0), market_pb2.MsgSubmitTask(
        spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=1_000_000, workers=2, rounds=plan.rounds,
        reward_per_round=plan.reward_per_round, collateral=plan.collateral, join_blocks=1_000, round_blocks=400,
        samples_per_worker=1))
    with RpcClient(url, timeout=10) as client:
        return max(task["id"] for task in client.query_json("/market/tasks")["tasks"])


def test_the_leave_command_refuses_bad_input_and_leaves_an_open_task_with_yes(tmp_path):
    with dev_node(tmp_path / "node") as url:
        home = tmp_path / "worker"
        keyring = Keyring(home, "test")
        info, _ = keyring.create("w")
        save_config(home, WorkerConfig(key_name="w", keyring_backend="test", node=url))
        worker_key = keyring.signer("w")
        send_included(url, dev_key(0), send_message(decode_address(info.address), 50_000_000))
        with RpcClient(url, timeout=10) as client:
            stake = client.run(get_market_params(client.async_client)).min_worker_stake
        send_included(url, worker_key, market_pb2.MsgRegisterWorker(
            stake=stake, blob_url="http://127.0.0.1:9", hardware=market_pb2.HardwareProfile(
                device="cpu", samples_per_second=100, memory_mb=1024, threads=1)))
        task_id = open_task(url)

        unknown = invoke("leave", 999, "--home", home, "--yes")
        assert unknown.exit_code != 0 and unknown.output.startswith("Error: ") and "999" in unknown.output
        outsider = invoke("leave", task_id, "--home", home, "--yes")
        assert outsider.exit_code != 0 and "not an active member" in outsider.output

        send_included(url, worker_key, market_pb2.MsgJoinTask(task_id=task_id))
        with RpcClient(url, timeout=10) as client:
            balance = int(client.query_json(f"/account/{info.address}")["balance"])
        declined = invoke("leave", task_id, "--home", home, input="n\n")
        assert declined.exit_code != 0 and "comes back in full" in declined.output
        assert "Error: cancelled: nothing was sent" in declined.output
        left = invoke("leave", task_id, "--home", home, "--yes", "-o", "json")
        assert left.exit_code == 0, left.output
        document = json.loads(left.output)
        assert document["task_id"] == task_id and document["included"] and document["code"] == 0
        with RpcClient(url, timeout=10) as client:
            task = client.query_json(f"/market/task/{task_id}")
            after = int(client.query_json(f"/account/{info.address}")["balance"])
        assert task["members"] == [] and task["status"] == "open"
        assert after > balance  # the collateral came back (less the transaction's fee)
        again = invoke("leave", task_id, "--home", home, "--yes")
        assert again.exit_code != 0 and "not a member" in again.output


def test_why_explains_a_leave_as_a_penalty_and_not_as_a_missed_round(make_chain):
    from market_helpers import MARKET_PARAMS, Market
    from whole_task import whole_task

    from trolly.compute.worker.why import explain_task

    market = Market(make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS}))
    task_id = market.open_task(workers=2, collateral=4_000_000)
    first, leaver = market.workers[:2]
    market.commit(task_id, 0, [first])
    assert market.chain.deliver(leaver, market_pb2.MsgLeaveTask(task_id=task_id)).ok
    market.chain.block()  # the sampling block
    market.vote(market.chain.operators, task_id)
    view = TaskView.from_answer(whole_task(market.chain.query, task_id))
    assert view.round == 1  # round 0 settled
    findings = explain_task(view, encode_address(leaver.address))
    assert [f.what for f in findings] == ["dropped in round 0 (left): penalty of 400000 utrl from its collateral"]
