"""End to end: `trolly-verifier start` (the console script) beside a real `trolly-node dev`.

Three workers (honest, bf16 cheat, offline) commit a round of a real task; the verifier process follows the
node (websocket), replays every sampled segment from the workers' blob servers, signs with the validator
operator's key from a test-backend keyring, and the chain decides: the honest worker passes, the cheat and
the offline worker fail. Stopped and started again, it casts no second vote.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from dev_node import dev_node, stop_process
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC
from trolly.wallet.keyring import Keyring
from trolly.wallet.passwords import PasswordSource

from verifier_scenario import VALIDATOR, WORKERS, assert_decided_correctly, landed_verdicts, open_and_commit, wait_for

pytestmark = pytest.mark.slow

BIN = pathlib.Path(sys.executable).parent
VERIFIER_SCRIPT = BIN / "trolly-verifier"


@pytest.fixture
def node(tmp_path):
    if not VERIFIER_SCRIPT.exists():
        pytest.skip(f"console script not installed at {VERIFIER_SCRIPT}")
    with dev_node(tmp_path / "node-home", block_time="500ms") as url:
        yield url


def start_verifier(url: str, tmp_path: pathlib.Path, log_name: str) -> tuple[subprocess.Popen, pathlib.Path]:
    log_path = tmp_path / log_name
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(VERIFIER_SCRIPT), "start", "--node", url, "--home", str(tmp_path / "verifier"), "--key", "validator",
             "--wallet-home", str(tmp_path / "wallet"), "--keyring-backend", "test", "--unavailable-attempts", "2",
             "--retry-delay", "0.5", "--poll-interval", "0.5", "--allow-private-blob-hosts"],
            stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True)
    return process, log_path


async def wait_until_following(process: subprocess.Popen, log_path: pathlib.Path) -> None:
    """Until the verifier logged that it follows the node (its signal handlers are installed by then)."""
    async def following():
        if process.poll() is not None:
            raise AssertionError(f"verifier exited {process.returncode}:\n{log_path.read_text()[-3000:]}")
        return "following" in log_path.read_text()

    await wait_for(following, timeout=120, what="the verifier to start")


def test_verifier_process_votes_on_a_real_node_and_never_twice(node, tmp_path):
    Keyring(tmp_path / "wallet", "test", PasswordSource.fixed("unused")).recover("validator", DEV_MNEMONIC)

    async def main():
        # Started first, so that it is warm when the segments are sampled: the dev chain's verification window
        # is 100 blocks (50 s at 500 ms), after which undecided workers settle as unverified.
        process, log_path = start_verifier(node, tmp_path, "verifier.log")
        scenario = None
        try:
            await wait_until_following(process, log_path)
            scenario = await open_and_commit(node, tmp_path, fund=True)
            seen = {}  # the task as the round settled: its votes are deleted when its reveal window closes

            async def decided():
                if process.poll() is not None:
                    raise AssertionError(f"verifier exited {process.returncode}:\n{log_path.read_text()[-3000:]}")
                outcomes = (await scenario.outcomes()).values()
                assert "unverified" not in outcomes, f"the window closed first:\n{log_path.read_text()[-3000:]}"
                if "pending" in outcomes:
                    return False
                seen["task"] = await scenario.task()
                return True

            await wait_for(decided, timeout=180, what="the verifier's votes to decide the round")
            await asyncio.sleep(2)  # let any votes still in flight land or be refused
            assert stop_process(process, 60) == 0, log_path.read_text()[-3000:]
            task = seen["task"]
            assert_decided_correctly(task)
            log_text = log_path.read_text()
            assert "voted PASS" in log_text and "voted FAIL" in log_text and "voted UNAVAILABLE" in log_text
            assert "subscribed to new blocks" in log_text
            assert "loaded (spec, dataset, initial weights)" in log_text  # warmed up before the sampling

            cheat = encode_address(WORKERS[1].address)
            # Asynchronously: the workers' blob servers run on this event loop and must keep serving.
            explain = await asyncio.create_subprocess_exec(
                str(VERIFIER_SCRIPT), "replay", "--node", node, "--task", str(scenario.task_id), "--round", "0",
                "--worker", cheat, "--segment", "1", "--allow-private-blob-hosts",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            output, errors = await asyncio.wait_for(explain.communicate(), 300)
            assert explain.returncode == 3, errors.decode()
            assert "verdict: FAIL" in output.decode() and "mode:    bitwise" in output.decode()

            again, again_log = start_verifier(node, tmp_path, "verifier-restart.log")
            await wait_until_following(again, again_log)
            await asyncio.sleep(3)  # a few passes over the same chain
            assert stop_process(again, 60) == 0, again_log.read_text()[-3000:]
            later = await scenario.task()
            if not any(c["verdicts_deleted"] for r in later["round_details"] for c in r["commitments"]):
                assert landed_verdicts(later) == landed_verdicts(task)  # else the window closed: nothing to compare
            assert "voted" not in again_log.read_text()
        finally:
            if process.poll() is None:
                stop_process(process, 60)
            if scenario is not None:
                await scenario.close()

    asyncio.run(main())
