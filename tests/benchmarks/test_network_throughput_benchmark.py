"""The network throughput benchmark (`python -m benchmarks.network_throughput`): a very short run on real
processes (4 CometBFT validators with Trolly, 4 with kvstore, 4 with the noop app, 4 with the noop app checking
signatures, the solo engine), and its refusals of bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(*arguments: str, timeout: float = 30, scratch: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(scratch)} if scratch is not None else None
    return subprocess.run([sys.executable, "-m", "benchmarks.network_throughput", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def cometbft_or_skip() -> None:
    from trolly.abci_app.cometbft import CometbftError, find_cometbft

    try:
        find_cometbft()
    except CometbftError as exc:
        pytest.skip(f"needs a cometbft v0.38 binary (`make setup` installs it): {exc}")


@pytest.mark.slow
def test_short_run_commits_every_network_s_transactions_and_ends_with_the_json_line(tmp_path):
    cometbft_or_skip()
    done = run_benchmark("--rates", "40,80", "--hold", "2", "--senders", "1", "--lanes", "8",
                         "--capacity-txs", "200", timeout=400, scratch=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("tx_per_s_trolly", "tx_per_s_kvstore", "tx_per_s_solo", "ratio_to_kvstore", "p99_latency_s",
                "tx_per_s_noop", "noop_ratio_to_kvstore", "tx_per_s_sigcheck"):
        assert key in summary
    for network in ("trolly", "kvstore", "noop", "sigcheck", "solo"):
        first = summary["steps"][network][0]
        assert first["sent"] == 80 and first["committed"] == first["sent"] and first["lost"] == 0, (network, first)
        assert first["p99_latency_s"] is not None
    assert summary["client_capacity"]["accepted"] == 200
    assert list(tmp_path.iterdir()) == []  # the homes, logs and sockets are removed


def processes_mentioning(text: str) -> list[int]:
    """Pids of running processes whose command line contains `text` (a run's temporary directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _interruptible() -> None:
    """In the benchmark's child, before exec: SIGINT back to its default, as in a terminal's foreground job. A suite
    started as a background job of a non-interactive shell inherits SIGINT ignored, and Python keeps an inherited
    ignore, so the benchmark would never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_stops_every_process_and_removes_its_files(tmp_path, signum):
    cometbft_or_skip()
    run = subprocess.Popen([sys.executable, "-m", "benchmarks.network_throughput", "--networks", "trolly",
                            "--rates", "20", "--hold", "60"], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                           preexec_fn=_interruptible)
    try:
        deadline = time.monotonic() + 120
        while len(processes_mentioning(str(tmp_path))) < 8:  # 4 apps and 4 cometbft nodes running
            assert run.poll() is None, run.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the network did not start"
            time.sleep(0.5)
        time.sleep(3)  # into the step
        run.send_signal(signum)
        run.wait(60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode != 0
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_rates_that_do_not_rise_are_refused_with_a_message():
    done = run_benchmark("--rates", "200,100", "--networks", "solo")
    assert done.returncode == 2
    assert "--rates must be positive and rising" in done.stderr


def test_an_unknown_network_is_refused_naming_the_known_ones():
    done = run_benchmark("--networks", "trolly,ethereum")
    assert done.returncode == 2
    assert "trolly, kvstore, noop, sigcheck, solo" in done.stderr


def test_a_rate_that_is_not_a_number_is_refused():
    done = run_benchmark("--rates", "100,fast", "--networks", "solo")
    assert done.returncode == 2
    assert "integers separated by commas" in done.stderr


def test_the_noop_app_admits_everything_and_proposes_only_what_fits():
    from benchmarks._noop_app import APP_HASH, NoopApplication
    from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci

    app = NoopApplication()
    assert app.check_tx(abci.RequestCheckTx(tx=b"not even a transaction")).code == 0
    proposal = app.prepare_proposal(abci.RequestPrepareProposal(txs=[b"a" * 40, b"b" * 40, b"c" * 40],
                                                                max_tx_bytes=100))
    assert list(proposal.txs) == [b"a" * 40, b"b" * 40]
    assert app.info(abci.RequestInfo()).last_block_height == 0
    block = app.finalize_block(abci.RequestFinalizeBlock(height=7, txs=[b"x", b"y"]))
    assert [result.code for result in block.tx_results] == [0, 0] and block.app_hash == APP_HASH
    assert app.info(abci.RequestInfo()).last_block_height == 7


def test_the_signature_checking_noop_app_refuses_a_forged_or_undecodable_transaction_only_when_new():
    from benchmarks._noop_app import NoopApplication
    from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
    from trolly.chain.crypto import PrivateKey
    from trolly.chain.proto.bank_pb2 import MsgSend
    from trolly.chain.tx import build_tx

    key = PrivateKey(bytes(range(32)))
    good = build_tx(key, "bench", 0, 1000, [MsgSend(to=key.address, amount=1)])
    forged = good[:-1] + bytes([good[-1] ^ 1])  # the signature is the envelope's last field
    app = NoopApplication(signatures=True)
    assert app.check_tx(abci.RequestCheckTx(tx=good, type=abci.CheckTxType.NEW)).code == 0
    assert app.check_tx(abci.RequestCheckTx(tx=forged, type=abci.CheckTxType.NEW)).code != 0
    assert app.check_tx(abci.RequestCheckTx(tx=b"junk", type=abci.CheckTxType.NEW)).code != 0
    assert app.check_tx(abci.RequestCheckTx(tx=forged, type=abci.CheckTxType.RECHECK)).code == 0
    assert NoopApplication().check_tx(abci.RequestCheckTx(tx=forged, type=abci.CheckTxType.NEW)).code == 0
