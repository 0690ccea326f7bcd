"""Fuzz soak: hostile, correctly signed transactions of every message type through running app processes.

    python -m benchmarks.fuzz_chain [--quick] [--txs N] [--block-txs K] [--seed S]

Two `trolly.abci_app.server` processes (PYTHONHASHSEED 1 and 2, each over its own LevelDB) are driven over
their ABCI unix sockets by the solo engine's ABCI client exactly as CometBFT drives an app: every transaction
is CheckTx'd on the mempool connection, then every transaction, admitted or not (a Byzantine proposer may
propose anything), goes into FinalizeBlock and Commit on the consensus connection. A third instance of the
app runs in this process over its own store as the reference: its state is checked against every module
invariant after each block.

The transactions come from `benchmarks/hostile_txs.py` (hypothesis strategies, generation phase only, so a run
is a stream of fresh hostile blocks). Counted:
- crashes: an app process that died, answered with an ABCI exception, or dropped a connection;
- invariant_failures: blocks after which the reference state broke an invariant;
- nondeterministic: blocks whose app hash or per-tx (code, codespace) differ between the three instances;
- unknown_codes: results whose (codespace, code) no ChainError declares.
The baseline, in the same run and over the same path, is a stream of honest sends: `honest_tx_per_s` against
`hostile_tx_per_s` shows what hostile input costs a node.

The adversarial corpus (`benchmarks/costly_txs.py`: transactions of the maximum size built to be as expensive
as possible to check) measures what one refused transaction can cost, against a transfer in the same run: each
corpus transaction and a fresh transfer are CheckTx'd alone on the first app, in turns, and the medians are
`worst_check_tx_ms` (the costliest kind, `worst_check_tx_kind`) and `transfer_check_tx_ms` (target: the worst at
most 20 times a transfer's). Then a proposal of the maximum size CometBFT's default block allows, filled with the
costliest kind from many signers (a proposer's own block, never seen in CheckTx), goes through ProcessProposal,
FinalizeBlock and Commit: `worst_block_seconds` is the first app's time for the three (target: at most 2 s).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.codes import registered_codes
from trolly.abci_app.engine.chainstate import max_data_bytes
from trolly.abci_app.engine.abci_client import AbciClient, AppConnectionLost, AppProtocolError
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.home_genesis import default_consensus_params
from trolly.abci_app.store import Store
from trolly.chain.app import check_invariants
from trolly.chain.proto import bank_pb2
from trolly.chain.state import State

from .costly_txs import COSTLY_SPECS, MEMO, costly_messages
from .hostile_txs import CHAIN_ID, KEYS, VALIDATORS, Signers, genesis_app_state, planned_tx, sign_block

HASH_SEEDS = ("1", "2")
KNOWN_CODES = set(registered_codes())
TX_FRAMING_BYTES = 4
"""What a transaction adds to a block's data beyond its own bytes (its field tag and length), at most."""


@dataclass
class Tally:
    txs: int = 0
    blocks: int = 0
    succeeded: int = 0
    check_tx_admitted: int = 0
    crashes: int = 0
    invariant_failures: int = 0
    nondeterministic: int = 0
    unknown_codes: int = 0
    codes: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)

    def note(self, kind: str, detail: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(f"{kind}: {detail}")


class AppProcess:
    """`python -m trolly.abci_app.server` on a unix socket, with its own PYTHONHASHSEED."""

    def __init__(self, directory: str, name: str, hash_seed: str) -> None:
        self.address = f"unix://{directory}/{name}.sock"
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONUNBUFFERED="1")
        self.stderr_path = os.path.join(directory, f"{name}.stderr")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trolly.abci_app.server", "--db", os.path.join(directory, name),
             "--address", self.address, "--log-level", "ERROR"],
            stdout=subprocess.PIPE, stderr=open(self.stderr_path, "w"), env=env, text=True)
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"app {name} did not start: {line!r}")
        self.client: AbciClient | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Soak:
    """Drives the two app processes and the in-process reference block by block."""

    def __init__(self, directory: str) -> None:
        self.apps = [AppProcess(directory, f"app-{seed}", seed) for seed in HASH_SEEDS]
        self.reference_store = Store(os.path.join(directory, "reference"), sync=False)
        self.reference = TrollyApplication(self.reference_store)
        self.signers = Signers()
        self.height = 0
        self.tally = Tally()
        self.loop = asyncio.new_event_loop()

    def start(self) -> None:
        self.loop.run_until_complete(self._start())

    async def _start(self) -> None:
        request = abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1, time=Timestamp(seconds=1),
                                        app_state_bytes=json.dumps(genesis_app_state()).encode())
        for app in self.apps:
            app.client = await AbciClient.connect(app.address)
        hashes = {(await app.client.init_chain(request)).app_hash for app in self.apps}
        hashes.add(self.reference.init_chain(request).app_hash)
        if len(hashes) != 1:
            raise RuntimeError("the instances disagree on the genesis app hash")

    def close(self) -> None:
        async def close_clients() -> None:
            for app in self.apps:
                if app.client is not None:
                    await app.client.close()
        self.loop.run_until_complete(close_clients())
        self.loop.close()
        for app in self.apps:
            app.stop()
        self.reference_store.close()

    def block(self, txs: list[bytes], check_invariants_now: bool = True) -> None:
        """CheckTx every tx on every app, then one block of all of them; tally what went wrong."""
        self._run_block(txs, proposed=False, check_invariants_now=check_invariants_now)

    def proposed_block(self, txs: list[bytes]) -> float:
        """One block no app has seen in CheckTx (a proposer's own) through ProcessProposal, FinalizeBlock and
        Commit on every app; tally what went wrong; return the first app's seconds for the three."""
        return self._run_block(txs, proposed=True, check_invariants_now=True)

    def _run_block(self, txs: list[bytes], proposed: bool, check_invariants_now: bool) -> float:
        if self.tally.crashes:
            return 0.0
        self.height += 1
        try:
            responses, seconds = self.loop.run_until_complete(self._block(txs, proposed))
        except (AppConnectionLost, AppProtocolError, ConnectionError) as exc:
            self.tally.crashes += 1
            self.tally.note("crash", f"height {self.height}: {type(exc).__name__}: {exc}")
            return 0.0
        for app in self.apps:
            if not app.alive():
                self.tally.crashes += 1
                self.tally.note("crash", f"{app.address} exited with {app.process.returncode}")
        reference = self.reference.finalize_block(self._finalize_request(txs))
        self.reference.commit(abci.RequestCommit())
        responses.append(reference)
        self._compare(responses)
        if check_invariants_now:
            try:
                check_invariants(State(self.reference_store.reader()))
            except AssertionError as exc:
                self.tally.invariant_failures += 1
                self.tally.note("invariant", f"height {self.height}: {exc}")
        self.signers.observe([[(e.type, {a.key: a.value for a in e.attributes}) for e in result.events]
                              for result in reference.tx_results])
        self.tally.blocks += 1
        self.tally.txs += len(txs)
        return seconds

    def _finalize_request(self, txs: list[bytes]) -> abci.RequestFinalizeBlock:
        return abci.RequestFinalizeBlock(height=self.height, txs=txs, time=Timestamp(seconds=1 + self.height),
                                         hash=self.height.to_bytes(32, "big"))

    async def _block(self, txs: list[bytes], proposed: bool) -> tuple[list[abci.ResponseFinalizeBlock], float]:
        responses, first_app_seconds = [], 0.0
        for app in self.apps:
            if not proposed:
                checks = await asyncio.gather(*[app.client.check_tx(tx) for tx in txs])
                if app is self.apps[0]:
                    self.tally.check_tx_admitted += sum(1 for check in checks if check.code == 0)
            started = time.perf_counter()
            if proposed:
                answer = await app.client.process_proposal(abci.RequestProcessProposal(
                    txs=txs, height=self.height, time=Timestamp(seconds=1 + self.height),
                    hash=self.height.to_bytes(32, "big")))
                if answer.status != abci.ResponseProcessProposal.ACCEPT:
                    raise RuntimeError(f"{app.address} rejected the proposal at height {self.height}")
            responses.append(await app.client.finalize_block(self._finalize_request(txs)))
            await app.client.commit()
            if app is self.apps[0]:
                first_app_seconds = time.perf_counter() - started
        return responses, first_app_seconds

    def check_tx_ms(self, tx: bytes) -> float:
        """CheckTx of `tx` alone on the first app, waiting for its answer: the round trip in milliseconds."""
        started = time.perf_counter()
        self.loop.run_until_complete(self.apps[0].client.check_tx(tx))
        return (time.perf_counter() - started) * 1e3

    def _compare(self, responses: list[abci.ResponseFinalizeBlock]) -> None:
        hashes = {response.app_hash for response in responses}
        outcomes = {tuple((r.code, r.codespace) for r in response.tx_results) for response in responses}
        if len(hashes) != 1 or len(outcomes) != 1:
            self.tally.nondeterministic += 1
            self.tally.note("nondeterministic", f"height {self.height}: {len(hashes)} app hashes")
        for result in responses[-1].tx_results:
            if result.code == 0:
                self.tally.succeeded += 1
                continue
            slot = (result.codespace, result.code)
            self.tally.codes[slot] = self.tally.codes.get(slot, 0) + 1
            if slot not in KNOWN_CODES:
                self.tally.unknown_codes += 1
                self.tally.note("unknown code", f"{slot}: {result.log[:120]}")


def honest_blocks(soak: Soak, txs: int, block_txs: int) -> float:
    """The baseline: plain valid sends over the same path; returns transactions per second."""
    started, sent = time.perf_counter(), 0
    while sent < txs:
        count = min(block_txs, txs - sent, len(KEYS))
        block = [soak.signers.sign(KEYS[i], [bank_pb2.MsgSend(to=KEYS[(i + 1) % len(KEYS)].address, amount=1)],
                                   fee=100_000) for i in range(count)]
        soak.block(block)
        sent += count
    return txs / (time.perf_counter() - started)


def hostile_blocks(soak: Soak, txs: int, block_txs: int, seed: int) -> float:
    """Fresh hostile blocks from the strategies until `txs` transactions went through; returns tx/s."""
    target = soak.tally.txs + txs
    started = time.perf_counter()
    counted = soak.tally.txs

    @hypothesis_seed(seed)
    @settings(max_examples=10**7, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.lists(planned_tx, min_size=max(1, block_txs // 2), max_size=block_txs,
                    unique_by=lambda planned: planned.signer_index))
    def one_block(planned) -> None:
        if soak.tally.txs >= target or soak.tally.crashes:
            raise _Done
        soak.block(sign_block(soak.signers, planned))

    try:
        one_block()
    except _Done:
        pass
    return (soak.tally.txs - counted) / (time.perf_counter() - started)


def adversarial_check_tx(soak: Soak, repeats: int) -> dict:
    """Each corpus transaction and a fresh transfer CheckTx'd alone, in turns, `repeats` times; the medians in
    milliseconds by kind (`transfer` for the transfers). The corpus's are refused, so they leave no state behind;
    the transfers, admitted into the first app's mempool, are dropped with it by the empty block that follows."""
    corpus = {name: soak.signers.sign(KEYS[-1 - index], costly_messages(name), fee=100_000, memo=MEMO)
              for index, name in enumerate(COSTLY_SPECS)}
    timings: dict[str, list[float]] = {name: [] for name in ["transfer", *corpus]}
    for turn in range(repeats):
        sender, recipient = KEYS[turn % (len(KEYS) - len(corpus))], KEYS[-1]
        transfer = soak.signers.sign(sender, [bank_pb2.MsgSend(to=recipient.address, amount=1)], fee=100_000,
                                     memo=str(turn))
        timings["transfer"].append(soak.check_tx_ms(transfer))
        for name, tx in corpus.items():
            timings[name].append(soak.check_tx_ms(tx))
    soak.block([])
    return {name: statistics.median(values) for name, values in timings.items()}


def worst_block(soak: Soak, kind: str) -> tuple[float, int, int]:
    """A proposal as large as CometBFT's default block allows, of corpus transactions of `kind` signed by every
    funded key in turn (consecutive nonces); returns (seconds, transactions, bytes)."""
    room = max_data_bytes(default_consensus_params(), VALIDATORS)
    messages = costly_messages(kind)
    nonces = dict(soak.signers.nonces)
    txs: list[bytes] = []
    total = 0
    while True:
        signer = KEYS[len(txs) % len(KEYS)]
        tx = soak.signers.sign(signer, messages, fee=100_000, memo=MEMO)
        if total + len(tx) + TX_FRAMING_BYTES > room:
            break
        soak.signers.nonces[signer.address] += 1
        txs.append(tx)
        total += len(tx) + TX_FRAMING_BYTES
    soak.signers.nonces = nonces  # the block's results move them on (Soak.observe)
    return soak.proposed_block(txs), len(txs), total


class _Done(Exception):
    """Raised inside the hypothesis loop once enough transactions went through (ends the run early)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 hostile transactions instead of 100,000")
    parser.add_argument("--txs", type=int, default=None, help="hostile transactions to send")
    parser.add_argument("--block-txs", type=int, default=60, help="most transactions per block")
    parser.add_argument("--seed", type=int, default=20261125, help="hypothesis seed of the hostile stream")
    parser.add_argument("--repeats", type=int, default=None,
                        help="CheckTx turns of the adversarial corpus (default 15, 41 without --quick)")
    args = parser.parse_args(argv)
    hostile = args.txs or (10_000 if args.quick else 100_000)
    honest = max(500, hostile // 20)
    repeats = args.repeats or (15 if args.quick else 41)
    if min(hostile, args.block_txs, repeats) < 1:
        parser.error("--txs, --block-txs and --repeats must be at least 1")

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trolly-fuzz-") as directory:
        soak = Soak(directory)
        try:
            soak.start()
            honest_rate = honest_blocks(soak, honest, args.block_txs)
            honest_counted = soak.tally.txs
            check_tx_ms = adversarial_check_tx(soak, repeats)
            worst_kind = max(COSTLY_SPECS, key=check_tx_ms.__getitem__)
            block_seconds, block_txs, block_bytes = worst_block(soak, worst_kind)
            before_hostile = (soak.tally.txs, soak.tally.succeeded)
            hostile_rate = hostile_blocks(soak, hostile, args.block_txs, args.seed)
        finally:
            soak.close()
    tally = soak.tally
    for problem in tally.problems:
        print(problem, file=sys.stderr)
    print(f"{tally.blocks} blocks; hostile codes seen: "
          + ", ".join(f"{space or 'ok'}/{code} x{n}" for (space, code), n in sorted(tally.codes.items())),
          file=sys.stderr)
    print(json.dumps({
        "txs": tally.txs - before_hostile[0], "crashes": tally.crashes, "invariant_failures": tally.invariant_failures,
        "nondeterministic": tally.nondeterministic, "unknown_codes": tally.unknown_codes,
        "blocks": tally.blocks, "succeeded": tally.succeeded - before_hostile[1],
        "check_tx_admitted": tally.check_tx_admitted, "distinct_failure_codes": len(tally.codes),
        "hostile_tx_per_s": round(hostile_rate, 1), "honest_tx_per_s": round(honest_rate, 1),
        "honest_txs": honest_counted, "transfer_check_tx_ms": round(check_tx_ms["transfer"], 3),
        "worst_check_tx_ms": round(check_tx_ms[worst_kind], 3), "worst_check_tx_kind": worst_kind,
        "worst_check_tx_ratio": round(check_tx_ms[worst_kind] / check_tx_ms["transfer"], 1),
        "check_tx_ms_by_kind": {name: round(value, 3) for name, value in sorted(check_tx_ms.items())},
        "worst_block_seconds": round(block_seconds, 3), "worst_block_txs": block_txs,
        "worst_block_bytes": block_bytes, "seconds": round(time.perf_counter() - started, 1),
    }))


if __name__ == "__main__":
    main()
