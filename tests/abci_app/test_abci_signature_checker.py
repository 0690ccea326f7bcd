"""The signature checker process (abci_app/signature_checker.py): same answers as checking on the spot, always.

The helper is a speed-up only, so every test compares against the one-core path: the same block executed
with the helper and without it gives the same results and the same writes, whatever the block holds (bad
signatures, replays, undecodable bytes) and whatever happens to the helper (not ready, dead, killed).
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trolly.abci_app.signature_checker import MIN_BATCH, SignatureChecker, answer_digest, execute_block, own_share, serve
from trolly.chain import app as chain_app
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.crypto import verify_signature
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.state import State
from trolly.chain.tx import build_tx, decode_tx, sign_bytes, signed_payloads

from chain_helpers import CHAIN_ID, Chain, test_key


def flip_last_byte(raw: bytes) -> bytes:
    return raw[:-1] + bytes([raw[-1] ^ 1])


def mixed_block(chain: Chain, size: int = 3 * MIN_BATCH) -> list[bytes]:
    """Valid sends among the chain's accounts, plus a bad signature, a replay, garbage and a wrong chain id."""
    senders = chain.accounts
    nonces = {sender.address: chain.nonce(sender) for sender in senders}
    txs = []
    for index in range(size):
        sender = senders[index % len(senders)]
        recipient = senders[(index + 1) % len(senders)]
        txs.append(build_tx(sender, CHAIN_ID, nonces[sender.address], 1, [MsgSend(to=recipient.address, amount=3)]))
        nonces[sender.address] += 1
    txs[5] = flip_last_byte(txs[5])  # the signature is the envelope's last field: now it does not verify
    txs[9] = txs[8]  # a replay inside the block
    txs[13] = b"\xff\x00 not a transaction"
    txs[17] = build_tx(senders[0], "another-chain", 0, 1, [MsgSend(to=senders[1].address, amount=1)])
    return txs


def execute(chain: Chain, txs: list[bytes], checker: SignatureChecker | None,
            checks: CheckedTxs | None = None) -> tuple[list, dict]:
    state = State(chain.kv)
    output = execute_block(state, chain.env(chain.height + 1), txs, checks, checker)
    return [(r.code, r.log, r.events) for r in output.tx_results], state.changes()


@pytest.fixture
def checker():
    """A running signature checker process, closed after the test."""
    running = SignatureChecker()
    if not running.start(wait=60):
        running.close()
        pytest.fail("the signature checker process did not become ready within 60 s")
    yield running
    running.close()


@pytest.mark.slow
def test_a_block_gives_the_same_results_and_writes_with_and_without_the_checker(checker):
    chain = Chain(accounts=8)
    txs = mixed_block(chain)
    with_checker = execute(chain, txs, checker, CheckedTxs())
    alone = execute(chain, txs, None)
    assert with_checker == alone
    assert execute(chain, txs, SignatureChecker(enabled=False), CheckedTxs()) == alone
    codes = [code for code, _, _ in alone[0]]
    assert codes[5] != 0 and codes[9] != 0 and codes[13] != 0 and codes[17] != 0
    assert codes.count(0) > len(txs) // 2  # (a sender's later nonces fail after one of its txs failed)


@pytest.mark.slow
def test_the_checker_does_check_and_the_executor_keeps_its_share(checker, monkeypatch):
    """The helper's answers are really used: counting the checks made on the spot, only the executor's own
    share (and the failures) were; the rest of the block's answers came from the helper."""
    chain = Chain(accounts=8)
    txs = mixed_block(chain)
    spot_checked = []

    def counting_check(pubkey, message, signature):
        spot_checked.append(message)
        return verify_signature(pubkey, message, signature)

    monkeypatch.setattr(chain_app, "verify_signature", counting_check)
    share = checker.share
    results, _ = execute(chain, txs, checker, CheckedTxs())
    assert [code for code, _, _ in results].count(0) > len(txs) // 2
    ours = sum(own_share(index, share) for index in range(len(txs)))
    # at most the executor's own share, plus the two that fail before or at the helper (bad signature, replay)
    assert len(spot_checked) <= ours + 2
    assert len(spot_checked) < len(txs) // 2


def test_serve_answers_exactly_what_the_reference_check_says():
    chain = Chain(accounts=4)
    txs = mixed_block(chain, size=40)
    frame = [len(txs).to_bytes(4, "big")] + [len(tx).to_bytes(4, "big") + tx for tx in txs]
    outbound = io.BytesIO()
    serve(io.BytesIO(b"".join(frame)), outbound, signed_payloads, verify_signature)
    data = outbound.getvalue()
    assert data[:1] == b"R"
    answers, offset, finished = {}, 1, False
    while offset < len(data):
        count, busy = int.from_bytes(data[offset:offset + 4], "big"), int.from_bytes(data[offset + 4:offset + 8], "big")
        body = data[offset + 8:offset + 8 + 33 * count]
        answers.update((body[i:i + 32], body[i + 32] == 1) for i in range(0, len(body), 33))
        offset += 8 + 33 * count
        finished = busy > 0
    assert finished
    expected = {}
    for raw in txs:
        try:
            tx = decode_tx(raw)
        except Exception:
            continue
        message = sign_bytes(tx.body_bytes)
        expected[answer_digest(tx.pubkey, hashlib.sha256(message).digest(), tx.signature)] = \
            verify_signature(tx.pubkey, message, tx.signature)
    assert answers == expected
    assert list(expected.values()).count(False) == 1  # the flipped signature


def helper_command(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


def signed(count: int) -> list[tuple[bytes, bytes, bytes, bytes]]:
    """(raw tx, pubkey, signed bytes, signature) for `count` valid transactions."""
    out = []
    for index in range(count):
        key = test_key(f"checker-{index}")
        raw = build_tx(key, CHAIN_ID, 0, 1, [MsgSend(to=key.address, amount=1)])
        tx = decode_tx(raw)
        out.append((raw, tx.pubkey, sign_bytes(tx.body_bytes), tx.signature))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("script, reason", [
    ("import sys, time; sys.stdout.buffer.write(b'R'); sys.stdout.flush(); sys.stdin.buffer.read(4)", "dies mid-batch"),
    ("import sys; sys.stdout.buffer.write(b'X'); sys.stdout.flush(); sys.stdin.buffer.read()", "says nonsense"),
    ("import sys; sys.exit(3)", "exits at once"),
])
def test_a_broken_helper_leaves_every_check_to_the_executor(script, reason, caplog):
    checker = SignatureChecker(command=helper_command(script))
    items = signed(MIN_BATCH)
    try:
        checker.start(wait=10)
        batch = checker.start_batch([raw for raw, *_ in items])
        verify = chain_app._verifier(batch)
        bad = (items[0][1], items[0][2] + b"x", items[0][3])
        assert not verify(*bad)
        assert all(verify(pubkey, message, signature) for _, pubkey, message, signature in items)
        if batch is not None:
            batch.close()
        assert checker.start_batch([raw for raw, *_ in items]) is None  # from now on: on the spot
    finally:
        checker.close()
    assert "signature checker process" in caplog.text


def test_small_blocks_and_a_disabled_checker_never_start_the_helper():
    checker = SignatureChecker(command=helper_command("raise SystemExit('must not start')"))
    assert checker.start_batch([b"tx"] * (MIN_BATCH - 1)) is None and checker.pid is None
    disabled = SignatureChecker(enabled=False, command=helper_command("raise SystemExit('must not start')"))
    assert disabled.start_batch([b"tx"] * MIN_BATCH) is None and disabled.pid is None
    assert not disabled.start(wait=0.1) and disabled.pid is None


def test_own_share_takes_the_requested_fraction_evenly():
    for share in (0.0, 0.1, 0.25, 0.5):
        taken = [index for index in range(1000) if own_share(index, share)]
        assert len(taken) == int(1000 * share)
        gaps = {b - a for a, b in zip(taken, taken[1:])}
        assert not gaps or max(gaps) - min(gaps) <= 1


def test_rebalance_moves_the_share_toward_both_sides_finishing_together():
    checker = SignatureChecker()
    checker.share = 0.1
    # the helper needs 100 us a signature, the executor 50 us a transaction besides its own checks
    for _ in range(20):
        own = int(1000 * checker.share)
        elapsed = (1000 * 50 + own * 100) * 1e-6
        checker.rebalance(1000, 1000 - own, elapsed, 0.0, (1000 - own) * 100e-6)
    assert checker.share == pytest.approx(0.25, abs=0.01)  # 50 + 0.25 * 100 == 0.75 * 100
    checker.rebalance(1000, 1000, 1.0, 0.0, 0.01)  # a helper far faster than the executor
    assert 0.0 <= checker.share <= checker.MAX_SHARE


@pytest.mark.slow
def test_the_helper_ends_when_its_parent_is_killed(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from trolly.abci_app.signature_checker import SignatureChecker
        checker = SignatureChecker()
        assert checker.start(wait=60)
        print(checker.pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        helper = int(parent.stdout.readline())
        assert os.path.exists(f"/proc/{helper}")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{helper}") and not _is_zombie(helper):
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{helper}") or _is_zombie(helper)
    finally:
        parent.kill()
        parent.wait()


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return False
