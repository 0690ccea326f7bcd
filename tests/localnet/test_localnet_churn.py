"""Churn on a real localnet (issue 28 item 3): `trolly-localnet demo --churn 2 --rounds 6` on the solo engine, with
real worker, verifier, app and engine processes. Two of the task's three workers are killed with SIGKILL (in round
0 and in round 2); the spare worker replaces the first; the task completes, each member is paid exactly for its
verified rounds, and the demo's JSON line names the killed members and the replacement with its pay."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess

import pytest

from localnet_helpers import LOCALNET, free_base_port, processes_mentioning, query
from trolly.localnet.home_layout import LocalnetConfig
from trolly.localnet.network import Localnet
from market_view_helpers import address, member_answer, task_answer
from trolly.localnet.churn import Churn
from trolly.wallet.market_views import TaskView
from whole_task import whole_task

ROUNDS = 6
TIMEOUT = 600  # seconds the demo follows its task: two kills cost two round deadlines (60 blocks each)


def view_at(round_: int, members: list[dict], status: str = "running") -> TaskView:
    return TaskView.from_answer(task_answer(status=status, phase="commit", round=round_, rounds=6, members=members))


def test_churn_kills_an_active_opening_member_two_rounds_apart_never_the_last_and_reports_replacements():
    killed = []
    names = {address(i): f"worker-{i}" for i in range(2, 6)}
    churn = Churn(2, lambda name: killed.append(name) or True, names)
    members = [member_answer(worker=address(i), index=i - 2) for i in (2, 3, 4)]
    assert asyncio.run(churn.advance(view_at(0, members, status="open"))) == []  # not before it runs
    lines = asyncio.run(churn.advance(view_at(0, members)))
    assert killed == ["worker-2"] and "killed with SIGKILL in round 0" in lines[0]
    members[0] |= {"status": "dropped", "left_round": 0}
    assert asyncio.run(churn.advance(view_at(1, members))) == [] and killed == ["worker-2"]  # two rounds apart
    members.append(member_answer(worker=address(5), index=0, first_round=2))
    lines = asyncio.run(churn.advance(view_at(2, members)))
    assert "worker-5 joined as a replacement in slot 0, training from round 2" in lines[0]
    assert killed == ["worker-2", "worker-3"]  # an opening member, never the replacement
    assert asyncio.run(churn.advance(view_at(4, members))) == []  # no more than asked
    summary = churn.summary(view_at(4, members))
    assert summary["killed"] == [{"worker": "worker-2", "round": 0}, {"worker": "worker-3", "round": 2}]
    assert [r["worker"] for r in summary["replacements"]] == ["worker-5"]

    lone = Churn(1, lambda name: killed.append(name) or True, names)
    assert asyncio.run(lone.advance(view_at(0, [member_answer(worker=address(2))]))) == []  # never the last one


def last_json_line(output: str) -> dict:
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_two_of_three_workers_leave_a_six_round_task_which_completes_paying_each_its_verified_rounds(tmp_path):
    home = tmp_path / "net"
    base = free_base_port(workers=4)
    rpc = LocalnetConfig(base_port=base).rpc_url(0)
    try:
        done = subprocess.run([LOCALNET, "demo", "--keep", "--engine", "solo", "--churn", "2", "--rounds", str(ROUNDS),
                               "--timeout", str(TIMEOUT), "--home", str(home), "--base-port", str(base)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT + 300)
        assert done.returncode == 0, done.stdout + done.stderr[-6000:]
        summary = last_json_line(done.stdout)
        assert summary["status"] == "completed" and summary["rounds"] == ROUNDS
        killed = [k["worker"] for k in summary["killed"]]
        assert len(killed) == 2 and summary["killed"][0]["round"] == 0 and summary["killed"][1]["round"] >= 2
        [replacement] = summary["replacements"]
        assert replacement["worker"] not in killed and replacement["first_round"] >= 2
        assert replacement["rounds_passed"] >= 1 and replacement["paid"] > 0

        view = whole_task(functools.partial(query, rpc), summary["task_id"])
        by_worker: dict[str, list[dict]] = {}
        for details in view["round_details"]:
            for commitment in details["commitments"]:
                if not details["final_report"]:
                    by_worker.setdefault(commitment["worker"], []).append(commitment | {"round": details["round"]})
        members = view["members"]
        assert len(members) == 4 and sum(m["first_round"] > 0 for m in members) == 1
        for member in members:
            commitments = by_worker.get(member["worker"], [])
            passed = [c for c in commitments if c["outcome"] == "passed"]
            assert member["paid"] == sum(c["paid"] for c in passed) and member["rounds_passed"] == len(passed)
            assert all(c["paid"] == 0 for c in commitments if c["outcome"] != "passed")
            assert all(c["round"] >= member["first_round"] for c in commitments)
        left = [m for m in members if m["status"] in ("dropped", "slashed")]
        assert len(left) == 2 and all(m["first_round"] == 0 for m in left)
        newcomer = next(m for m in members if m["first_round"] > 0)
        assert newcomer["status"] == "finished" and newcomer["paid"] == replacement["paid"]
        assert newcomer["index"] == min(left, key=lambda m: m["left_round"])["index"]  # the first slot freed
        assert sorted(summary["paid_per_worker"].values()) == sorted(m["paid"] for m in members)
        report = " ".join(done.stderr.split())
        assert "MISMATCH" not in report and "killed with SIGKILL in round 0" in report
    finally:
        Localnet(home).down()
    assert processes_mentioning(str(home)) == []
