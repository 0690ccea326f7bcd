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
`hostile_tx_per_s` shows what hostile input costs a node. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from trolly.abci_app.engine.abci_client import AbciClient, AppConnectionLost, AppProtocolError
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.store import Store
from trolly.chain.app import check_invariants
from trolly.chain.proto import bank_pb2
from trolly.chain.state import State

from .hostile_txs import CHAIN_ID, KEYS, Signers, genesis_app_state, planned_tx, sign_block

HASH_SEEDS = ("1", "2")
KNOWN_CODES = set(registered_codes())


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
        if self.tally.crashes:
            return
        self.height += 1
        try:
            responses = self.loop.run_until_complete(self._block(txs))
        except (AppConnectionLost, AppProtocolError, ConnectionError) as exc:
            self.tally.crashes += 1
            self.tally.note("crash", f"height {self.height}: {type(exc).__name__}: {exc}")
            return
        for app in self.apps:
            if not app.alive():
                self.tally.crashes += 1
                self.tally.note("crash", f"{app.address} exited with {app.process.returncode}")
        request = abci.RequestFinalizeBlock(height=self.height, txs=txs, time=Timestamp(seconds=1 + self.height),
                                            hash=self.height.to_bytes(32, "big"))
        reference = self.reference.finalize_block(request)
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

    async def _block(self, txs: list[bytes]) -> list[abci.ResponseFinalizeBlock]:
        responses = []
        for app in self.apps:
            checks = await asyncio.gather(*[app.client.check_tx(tx) for tx in txs])
            if app is self.apps[0]:
                self.tally.check_tx_admitted += sum(1 for check in checks if check.code == 0)
            request = abci.RequestFinalizeBlock(height=self.height, txs=txs,
                                                time=Timestamp(seconds=1 + self.height),
                                                hash=self.height.to_bytes(32, "big"))
            responses.append(await app.client.finalize_block(request))
            await app.client.commit()
        return responses

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


class _Done(Exception):
    """Raised inside the hypothesis loop once enough transactions went through (ends the run early)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 hostile transactions instead of 100,000")
    parser.add_argument("--txs", type=int, default=None, help="hostile transactions to send")
    parser.add_argument("--block-txs", type=int, default=60, help="most transactions per block")
    parser.add_argument("--seed", type=int, default=20261125, help="hypothesis seed of the hostile stream")
    args = parser.parse_args(argv)
    hostile = args.txs or (10_000 if args.quick else 100_000)
    honest = max(500, hostile // 20)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trolly-fuzz-") as directory:
        soak = Soak(directory)
        try:
            soak.start()
            honest_rate = honest_blocks(soak, honest, args.block_txs)
            honest_counted = soak.tally.txs
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
        "txs": tally.txs - honest_counted, "crashes": tally.crashes, "invariant_failures": tally.invariant_failures,
        "nondeterministic": tally.nondeterministic, "unknown_codes": tally.unknown_codes,
        "blocks": tally.blocks, "succeeded": tally.succeeded - honest_counted,
        "check_tx_admitted": tally.check_tx_admitted, "distinct_failure_codes": len(tally.codes),
        "hostile_tx_per_s": round(hostile_rate, 1), "honest_tx_per_s": round(honest_rate, 1),
        "honest_txs": honest_counted, "seconds": round(time.perf_counter() - started, 1),
    }))


if __name__ == "__main__":
    main()
