"""Signature checks on a second core: a helper process verifies a block's signatures while the block executes.

An ed25519 check is the largest single cost of a transfer, and a block's checks do not depend on its
execution. A validator has usually checked a block's transactions already, in CheckTx (the app remembers
them, `chain.checked_txs`); a block it has not seen (catching up, block sync) is where this helper earns its
keep. FinalizeBlock (`execute_block`) hands such a block to this helper process first and then executes it
(`chain.app.apply_block` with the answers): by the time a transaction's ante handler asks for its signature,
the answer is usually waiting in the pipe. The executor checks a small interleaved share itself, sized from
the last batch's timings so that both sides finish together (`SignatureChecker.rebalance`). A thread would
not do: PyNaCl releases the GIL inside libsodium, but each check must take it back, and the executing thread
holds it for milliseconds at a time, so a check beside a busy Python thread waits most of its time.

Answers are the same with or without the helper; only where the time is spent changes:
- the helper verifies exactly what `chain.ante.check_tx_stateless` verifies (`chain.tx.signed_payloads`)
  with the same check (`chain.crypto.verify_signature`), and answers by a digest of (public key, SHA-256 of the signed bytes, signature);
- a signature it was not given, a batch it has not finished when the block ends, a helper that is still
  starting, has died or is disabled: the caller checks on the spot, as it always could;
- small batches (`MIN_BATCH`) are checked on the spot, where the round trip would cost more than it saves.

The process is `python -m trolly.abci_app.signature_checker`, started with the ABCI server (or at the first
large block; blocks that come while it starts are checked on the spot) and ended when its stdin closes (this
process exiting, even by kill -9). Nothing here is global: `trolly-node start` builds one `SignatureChecker`
(on unless the home's config.toml says `[trolly] signature_checker = false` or `--signature-checker off` is
given) and hands it to the application, which passes it to `execute_block`.

Wire form, all integers big-endian: the parent writes a batch as `u32 count` then `u32 length + tx bytes` per
transaction; the helper first writes one byte `R` when ready, then per batch one or more chunks
`u32 n, u32 busy, n x (32-byte digest, u8 ok)` where `busy` is 0 except in the batch's last chunk, which
carries the microseconds the helper spent on the batch (plus one).
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from typing import BinaryIO, Callable, Iterable

from trolly.chain import app as chain_app
from trolly.chain.block import BlockEnv, BlockOutput
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.state import State

log = logging.getLogger(__name__)

MIN_BATCH = 32
"""Fewest transactions worth sending to the helper."""

CHUNK = 64
"""Answers per chunk the helper writes (each chunk is one write, so the parent can start early)."""

READY = b"R"
U32_MAX = (1 << 32) - 1

Payload = tuple[bytes, bytes, bytes]  # (public key, signed bytes, signature)


def answer_digest(pubkey: bytes, message_hash: bytes, signature: bytes) -> bytes:
    """What a check is known by on the wire: it binds the key, the signed bytes and the signature (the key's
    length is part of it, so no split of the same bytes into other parts can share a digest)."""
    return hashlib.sha256(len(pubkey).to_bytes(4, "big") + pubkey + message_hash + signature).digest()


# -- the helper process -----------------------------------------------------------------------------------------
def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def _read_batch(stream: BinaryIO) -> list[bytes] | None:
    header = _read_exactly(stream, 4)
    if header is None:
        return None
    txs = []
    for _ in range(int.from_bytes(header, "big")):
        length = _read_exactly(stream, 4)
        tx = None if length is None else _read_exactly(stream, int.from_bytes(length, "big"))
        if tx is None:
            return None
        txs.append(tx)
    return txs


def serve(inbound: BinaryIO, outbound: BinaryIO, payloads: Callable[[list[bytes]], Iterable[Payload]],
          check: Callable[[bytes, bytes, bytes], bool]) -> None:
    """The helper's loop: answer batches until the input ends."""
    outbound.write(READY)
    outbound.flush()
    while (txs := _read_batch(inbound)) is not None:
        started = time.perf_counter()
        answers: list[bytes] = []
        for pubkey, message, signature in payloads(txs):
            ok = check(pubkey, message, signature)
            answers.append(answer_digest(pubkey, hashlib.sha256(message).digest(), signature) + (b"\x01" if ok else b"\x00"))
            if len(answers) == CHUNK:
                _write_chunk(outbound, answers)
                answers = []
        _write_chunk(outbound, answers, busy_us=1 + int((time.perf_counter() - started) * 1e6))


def _write_chunk(outbound: BinaryIO, answers: list[bytes], busy_us: int = 0) -> None:
    """`busy_us` > 0 marks the batch's last chunk and says how long the helper spent on the batch."""
    outbound.write(len(answers).to_bytes(4, "big") + min(busy_us, U32_MAX).to_bytes(4, "big") + b"".join(answers))
    outbound.flush()


def main() -> None:
    from trolly.chain.crypto import verify_signature
    from trolly.chain.tx import signed_payloads

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent decides
    serve(sys.stdin.buffer, sys.stdout.buffer, signed_payloads, verify_signature)


# -- the parent's side ------------------------------------------------------------------------------------------
class CheckerUnavailable(Exception):
    """The helper cannot answer (not started, still starting, died); the caller checks on the spot."""


def own_share(index: int, share: float) -> bool:
    """Whether the executing process checks transaction `index` itself: a fraction `share` of the block, spread
    evenly (with share 0.25, every fourth)."""
    return int((index + 1) * share) > int(index * share)


class SignatureChecker:
    """The parent's handle on the helper process; one batch at a time.

    Both cores check signatures: the helper most of them, the executing process a `share` of the block that
    it checks on the spot, interleaved, so that neither waits for the other. The share follows the measured
    costs: after each batch, the helper's time per signature and the executor's time per transaction give the
    split at which both would finish together."""

    INITIAL_SHARE = 0.1
    MAX_SHARE = 0.5

    def __init__(self, enabled: bool = True, command: list[str] | None = None, min_batch: int = MIN_BATCH) -> None:
        self._command = command or [sys.executable, "-m", "trolly.abci_app.signature_checker"]
        self.min_batch = min_batch
        self.enabled = enabled  # off: never started, every check on the spot, on one core
        self.share = self.INITIAL_SHARE
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._broken = False
        self._batch: Batch | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start_batch(self, txs: list[bytes]) -> "Batch | None":
        """Send the helper its share of `txs`; None when all are to be checked on the spot instead."""
        if self._batch is not None:
            self._batch.close()
        if not self.enabled or self._broken or len(txs) < self.min_batch:
            return None
        try:
            if not self._available():
                return None
            share = self.share
            theirs = [tx for index, tx in enumerate(txs) if not own_share(index, share)]
            frame = [len(theirs).to_bytes(4, "big")]
            for tx in theirs:
                frame += (len(tx).to_bytes(4, "big"), tx)
            self._process.stdin.write(b"".join(frame))
            self._process.stdin.flush()
        except (OSError, ValueError) as error:
            self._fail(f"cannot send a batch: {error}")
            return None
        self._batch = Batch(self, share, len(txs), len(theirs))
        return self._batch

    def start(self, wait: float = 0.0) -> bool:
        """Start the helper if it is not running (a node does so at start-up, so that its first large block
        finds it ready); wait up to `wait` seconds for it. True when it is ready."""
        deadline = time.monotonic() + wait
        while self.enabled and not self._broken:
            if self._available():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return False

    def _available(self) -> bool:
        """True when the helper is up and idle; starts it (and answers False) the first time."""
        if self._process is None:
            self._process = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=None, close_fds=True)
            os.set_blocking(self._process.stdout.fileno(), False)  # polled until ready, then read blocking
            return False
        if not self._ready:
            try:
                first = self._process.stdout.read(1)  # None (or BlockingIOError) while nothing has come
            except BlockingIOError:
                first = None
            if first is None or (first == b"" and self._process.poll() is None):
                if self._process.poll() is not None:
                    self._fail(f"exited with code {self._process.returncode} while starting")
                return False
            if first != READY:
                self._fail(f"sent {first!r} instead of its ready byte")
                return False
            os.set_blocking(self._process.stdout.fileno(), True)
            self._ready = True
        return True

    def read_chunk(self) -> tuple[list[tuple[bytes, bool]], int]:
        """The next chunk of answers and, if it ends the batch, the helper's busy time in microseconds (else 0);
        CheckerUnavailable if the helper died."""
        stdout = self._process.stdout
        header = _read_exactly(stdout, 8)
        body = None if header is None else _read_exactly(stdout, 33 * int.from_bytes(header[:4], "big"))
        if body is None:
            self._fail("closed its output")
            raise CheckerUnavailable("signature checker process ended")
        answers = [(body[i:i + 32], body[i + 32] == 1) for i in range(0, len(body), 33)]
        return answers, int.from_bytes(header[4:], "big")

    def rebalance(self, size: int, sent: int, elapsed: float, waited: float, helper_busy: float) -> None:
        """Move the share toward the split where both sides finish together, from one batch's timings."""
        if sent == 0 or helper_busy <= 0:
            return
        per_signature = helper_busy / sent  # what a check costs, overhead included (about the same here)
        own_checks = size - sent
        executor_per_tx = max(elapsed - waited - own_checks * per_signature, 0.0) / size
        # Finishing together: executor_per_tx + s * per_signature == (1 - s) * per_signature.
        balanced = (per_signature - executor_per_tx) / (2 * per_signature)
        balanced = min(max(balanced, 0.0), self.MAX_SHARE)
        self.share = (self.share + balanced) / 2

    def _fail(self, reason: str) -> None:
        log.warning("signature checker process %s; checking signatures in this process from now on", reason)
        self._broken = True
        self.close()

    def close(self) -> None:
        """End the helper (closing its input ends it)."""
        process, self._process = self._process, None
        self._ready = False
        self._batch = None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


class Batch:
    """The answers to one block's signatures, read from the helper as they are needed.

    The executor announces each transaction with `at(index)` before executing it; `answer` then says None
    at once for the executor's own share (it checks those itself) and otherwise waits for the helper."""

    def __init__(self, checker: SignatureChecker, share: float, size: int, sent: int) -> None:
        self._checker = checker
        self._share = share
        self._size = size
        self._sent = sent
        self._answers: dict[bytes, bool] = {}
        self._finished = False
        self._ours = False
        self._started = time.perf_counter()
        self._waited = 0.0
        self._helper_busy = 0.0

    def at(self, index: int) -> None:
        self._ours = own_share(index, self._share)

    def answer(self, pubkey: bytes, message_hash: bytes, signature: bytes) -> bool | None:
        """The helper's answer for this check (waiting for it if it is still coming); None if it is the
        executor's own, was not given to the helper, or the helper cannot answer."""
        if self._ours:
            return None
        digest = answer_digest(pubkey, message_hash, signature)
        answers = self._answers
        while digest not in answers:
            if self._finished or not self._read():
                return None
        return answers.pop(digest)

    def _read(self) -> bool:
        started = time.perf_counter()
        try:
            chunk, busy_us = self._checker.read_chunk()
        except CheckerUnavailable:
            self._finished = True
            return False
        finally:
            self._waited += time.perf_counter() - started
        self._answers.update(chunk)
        if busy_us:
            self._finished = True
            self._helper_busy = (busy_us - 1) / 1e6
        return True

    def close(self) -> None:
        """Read what is left of the batch (so the pipe is clear for the next), learn from its timings and
        forget the answers."""
        elapsed = time.perf_counter() - self._started
        while not self._finished and self._read():
            pass
        self._answers.clear()
        if self._checker._batch is self:
            self._checker._batch = None
            self._checker.rebalance(self._size, self._sent, elapsed, self._waited, self._helper_busy)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- FinalizeBlock's use of it -----------------------------------------------------------------------------------
def execute_block(state: State, env: BlockEnv, txs: list[bytes], checks: CheckedTxs | None = None,
                  checker: SignatureChecker | None = None) -> BlockOutput:
    """`chain.app.apply_block` with the block's signatures checked by `checker`'s helper process alongside:
    what FinalizeBlock runs. Without a checker (or with it off), every check runs here, on the spot.

    A validator has usually checked every transaction of a block already, in CheckTx when it reached the
    mempool: those are remembered in `checks`, so the helper is used only when at least `min_batch` of the
    block's transactions are not; otherwise it would check them all again for nothing, and FinalizeBlock
    would wait for it to finish.
    """
    if checker is None or not checker.enabled:
        return chain_app.apply_block(state, env, txs, checks)
    unchecked = len(txs) if checks is None else sum(1 for raw in txs if raw not in checks)
    if unchecked < checker.min_batch:
        return chain_app.apply_block(state, env, txs, checks)
    batch = checker.start_batch(txs)
    if batch is None:
        return chain_app.apply_block(state, env, txs, checks)
    with batch:
        return chain_app.apply_block(state, env, txs, checks, batch)


if __name__ == "__main__":
    main()
