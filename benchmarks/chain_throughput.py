"""Chain throughput: signed `send` transactions through execution, app hash and the LevelDB commit.

    python -m benchmarks.chain_throughput [--quick] [--profile] [--accounts N] [--blocks N] [--block-size N]

Genesis funds `--accounts` accounts (100,000 by default) and one validator. Transactions are built and
signed before any timing starts (signing is the client's cost): each is a `MsgSend` of 1 utrl with a fee
of 1 utrl from a distinct sender, so every one must succeed (the run fails if one does not). A first block
warms caches and is not timed. Then the same blocks are measured three ways:

(a) in process: `execute_block` (`apply_block` with the signature checker) on a `State` over the store,
    `store.prepare(changes)` (the app hash) and `store.commit` (one synced LevelDB write batch), exactly what FinalizeBlock + Commit do; once on one
    core (`tx_per_s_in_process_one_core`: every signature checked in this process) and once as a node runs
    by default (`tx_per_s_in_process`: the signature checker process, `abci_app/signature_checker.py`, checks
    most of each block's signatures on the second core while the block executes); both give the same app
    hashes, and the CPU time of the checker process is counted in the per-CPU-second figure;
(b) over the ABCI socket: `python -m trolly.abci_app.server` runs in its own process with its own database,
    and this process plays CometBFT on four connections: Info, InitChain, then FinalizeBlock, Flush,
    Commit, Flush per block; the clock covers the whole exchange, protobuf and the socket included. Every
    app hash it returns must equal the in-process one (same genesis, same blocks).

The ceiling is single-core ed25519 verification with PyNaCl, measured in the same run on the same signed
bytes, in samples taken between the timed blocks (so under the same load): each transaction needs one
verification, so no app checking signatures on one core can beat it. The targets are half of it in
process (10,000 tx/s on a machine verifying 20,000/s) and 5,000 tx/s over the socket.
Every rate is also given per CPU second (stderr): on a machine shared with other work the wall-clock figures
fall with the load, which is reported too. `--profile` prints the top cProfile entries (CPU time) of the
in-process run to stderr. The last line is JSON:
`{"tx_per_s_in_process": N, "tx_per_s_socket": N, "tx_per_s_in_process_one_core": N,
"ed25519_verify_per_s": N, "accounts": N}`
(`tx_per_s_socket` is null, with the reason on stderr, when the server cannot be started).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import json
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import nacl.signing

from trolly.abci_app.store import Store
from trolly.chain.app import init_chain
from trolly.chain.bech32_fast import bech32_encode_bytes
from trolly.chain.block import BlockEnv
from trolly.abci_app.signature_checker import SignatureChecker, execute_block
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.state import State
from trolly.chain.tx import build_tx, decode_tx, sign_bytes

CHAIN_ID = "trolly-bench"
GENESIS_BALANCE = 10**12
VALIDATOR_STAKE = 10 * 10**6
GENESIS_TIME_NS = 1_700_000_000 * 10**9
CHAIN_ID_KEY = b"\x04chain_id"  # where the ABCI adapter records the chain id at InitChain (keys.CHAIN_META)


@dataclass(frozen=True)
class Config:
    accounts: int
    blocks: int
    block_size: int
    warmup_size: int


FULL = Config(accounts=100_000, blocks=10, block_size=5_000, warmup_size=1_000)
QUICK = Config(accounts=20_000, blocks=4, block_size=2_000, warmup_size=500)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- workload ---------------------------------------------------------------------------------------------------
def make_keys(count: int, label: bytes) -> list[PrivateKey]:
    return [PrivateKey(hashlib.sha256(b"trolly/bench/" + label + i.to_bytes(4, "big")).digest()) for i in range(count)]


def genesis_app_state(accounts: list[PrivateKey], operator: PrivateKey, consensus: PrivateKey) -> dict:
    import base64

    return {
        # Every tx pays a fixed 1 utrl, signed before timing starts: the fee rule is set to accept that.
        "params": {"auth": {"min_fee": 1, "fee_per_byte": 0}},
        "accounts": [{"address": encode_address(k.address), "balance": str(GENESIS_BALANCE)}
                     for k in accounts + [operator]],
        "validators": [{"operator": encode_address(operator.address), "pub_key": base64.b64encode(consensus.pubkey).decode(),
                        "stake": str(VALIDATOR_STAKE), "moniker": "bench"}],
    }


def sign_blocks(accounts: list[PrivateKey], sizes: list[int]) -> list[list[bytes]]:
    """Blocks of sends; sender i (nonce 0, each used once) pays 1 utrl to account i + 1."""
    total = sum(sizes)
    if total > len(accounts):
        raise SystemExit(f"{total} transactions need as many accounts, only {len(accounts)}")
    txs = [
        build_tx(accounts[i], CHAIN_ID, 0, 1, [MsgSend(to=accounts[(i + 1) % len(accounts)].address, amount=1)])
        for i in range(total)
    ]
    blocks, start = [], 0
    for size in sizes:
        blocks.append(txs[start:start + size])
        start += size
    return blocks


def block_env(height: int) -> BlockEnv:
    return BlockEnv(chain_id=CHAIN_ID, height=height, time_ns=GENESIS_TIME_NS + height * 10**9)


# -- clocks and the ceiling -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rate:
    """Operations per second by the wall clock (the figure reported) and per second of CPU time used.

    On a shared machine the wall-clock figure drops when other processes compete for the cores; the CPU
    figure shows what the code itself costs (it counts every thread of the measured processes)."""

    per_wall_second: float
    per_cpu_second: float


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a running process, from /proc (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The running children of `pid` (the ABCI server's signature checker)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except FileNotFoundError:
        return []


class Stopwatch:
    """Wall and CPU time summed over start/stop intervals; CPU of this process plus that of the processes
    `others()` names at each reading (the signature checker, the ABCI server and its children)."""

    def __init__(self, others: Callable[[], list[int]] = list) -> None:
        self.others = others
        self.wall = self.cpu = 0.0
        self._started: tuple[float, float] | None = None

    def _cpu(self) -> float:
        return time.process_time() + sum(process_cpu_seconds(pid) for pid in self.others())

    def start(self) -> None:
        self._started = (time.perf_counter(), self._cpu())

    def stop(self) -> None:
        wall, cpu = self._started
        self.wall += time.perf_counter() - wall
        self.cpu += self._cpu() - cpu

    def rate(self, operations: int) -> Rate:
        return Rate(operations / self.wall, operations / max(self.cpu, 1e-9))


class Ceiling:
    """Single-core PyNaCl verification of the benchmark's own signatures, sampled between the timed blocks so
    that it is measured under the same load as they are (a shared machine's load changes by the minute)."""

    SAMPLE = 300
    """Verifications per sample (a few tens of milliseconds, against about a second per block)."""

    def __init__(self, txs: list[bytes]) -> None:
        self.prepared = []
        for raw in txs:
            tx = decode_tx(raw)
            self.prepared.append((nacl.signing.VerifyKey(tx.pubkey), sign_bytes(tx.body_bytes), tx.signature))
        self.watch = Stopwatch()
        self.count = 0

    def sample(self, count: int = SAMPLE) -> None:
        chosen = [self.prepared[(self.count + i) % len(self.prepared)] for i in range(count)]
        self.watch.start()
        for verify_key, message, signature in chosen:
            verify_key.verify(message, signature)
        self.watch.stop()
        self.count += count

    def rate(self) -> Rate:
        return self.watch.rate(self.count)


# -- (a) in process ----------------------------------------------------------------------------------------------
def run_in_process(db_path: str, app_state: bytes, blocks: list[list[bytes]], ceiling: Ceiling,
                   profile: bool, checker: bool) -> tuple[Rate, list[bytes]]:
    """Returns (tx/s over the timed blocks, app hash after every block). `checker`: with the signature
    checker process (the product's default), else every signature checked in this process."""
    helper = SignatureChecker(enabled=checker)
    if checker and not helper.start(wait=30):
        helper.close()
        raise SystemExit("the signature checker process did not start")
    for phase in PHASES:
        PHASES[phase] = 0.0
    store = Store(db_path)
    run = Execution(store, helper, CheckedTxs())  # the blocks are new to this node, as in a block sync
    try:
        genesis = State(store.reader())
        genesis.set(CHAIN_ID_KEY, CHAIN_ID.encode())
        init_chain(genesis, block_env(0), json.loads(app_state))
        store.commit(store.prepare(genesis.changes(), 0))
        del genesis
        gc.collect()
        hashes = [run.execute(1, blocks[0])]
        profiler = cProfile.Profile(time.process_time) if profile else None
        if profiler:
            profiler.enable()
        watch = Stopwatch(lambda: [pid] if checker and (pid := helper.pid) else [])
        for offset, txs in enumerate(blocks[1:]):
            ceiling.sample()
            watch.start()
            hashes.append(run.execute(offset + 2, txs))
            watch.stop()
        rate = watch.rate(sum(len(b) for b in blocks[1:]))
        if profiler:
            profiler.disable()
            report = io.StringIO()
            pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(30)
            log(report.getvalue())
        return rate, hashes
    finally:
        helper.close()
        store.close()


PHASES = {"apply_block": 0.0, "changes+prepare": 0.0, "commit": 0.0}
"""Seconds spent in each phase of `execute`, summed over the timed blocks (reported on stderr)."""


@dataclass
class Execution:
    """What FinalizeBlock + Commit run, with the helpers a node hands its application."""

    store: Store
    checker: SignatureChecker
    checks: CheckedTxs

    def execute(self, height: int, txs: list[bytes]) -> bytes:
        return execute(self.store, height, txs, self.checks, self.checker)


def execute(store: Store, height: int, txs: list[bytes], checks: CheckedTxs, checker: SignatureChecker) -> bytes:
    started = time.perf_counter()
    state = State(store.reader())
    output = execute_block(state, block_env(height), txs, checks, checker)
    executed = time.perf_counter()
    failed = [r for r in output.tx_results if not r.ok]
    if failed:
        raise SystemExit(f"block {height}: {len(failed)} transactions failed, first: {failed[0].log}")
    pending = store.prepare(state.changes(), height)
    prepared = time.perf_counter()
    store.commit(pending)
    if height > 1:
        PHASES["apply_block"] += executed - started
        PHASES["changes+prepare"] += prepared - executed
        PHASES["commit"] += time.perf_counter() - prepared
    return pending.app_hash


# -- (b) over the ABCI socket ------------------------------------------------------------------------------------
class AbciClient:
    """A blocking CometBFT stand-in on one connection: uvarint-framed Request/Response protobufs."""

    def __init__(self, host: str, port: int) -> None:
        from trolly.abci_app.framing import decode_frames, encode_frame
        from trolly.abci_app.proto.tendermint.abci import types_pb2

        self.abci = types_pb2
        self._encode_frame = encode_frame
        self._decode_frames = decode_frames
        self._socket = socket.create_connection((host, port))
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def call(self, case: str, message) -> object:
        """Send one request and a Flush, as CometBFT's synchronous calls do; return the typed response."""
        request = self.abci.Request(**{case: message})
        flush = self.abci.Request(flush=self.abci.RequestFlush())
        self._socket.sendall(self._encode_frame(request.SerializeToString()) + self._encode_frame(flush.SerializeToString()))
        responses = self._receive(2)
        response = self.abci.Response.FromString(responses[0])
        if response.WhichOneof("value") != case:
            raise RuntimeError(f"{case}: the app answered {response.WhichOneof('value')}: {response}")
        return getattr(response, case)

    def _receive(self, count: int) -> list[bytes]:
        frames: list[bytes] = []
        while len(frames) < count:
            found, used = self._decode_frames(self._buffer)
            frames += found
            self._buffer = self._buffer[used:]
            if len(frames) >= count:
                break
            chunk = self._socket.recv(1 << 20)
            if not chunk:
                raise RuntimeError("the app closed the connection")
            self._buffer += chunk
        return frames

    def close(self) -> None:
        self._socket.close()


def run_over_socket(db_path: str, app_state: bytes, blocks: list[list[bytes]], expected: list[bytes],
                    ceiling: Ceiling) -> Rate | None:
    try:
        from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
        from google.protobuf.timestamp_pb2 import Timestamp
    except ImportError as exc:
        log(f"socket run skipped: {exc}")
        return None
    server = subprocess.Popen(
        [sys.executable, "-m", "trolly.abci_app.server", "--db", db_path, "--address", "tcp://127.0.0.1:0",
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    clients: list[AbciClient] = []
    try:
        line = server.stdout.readline()
        if "listening on tcp://" not in line:
            log(f"socket run skipped: the ABCI server did not start: {line!r} {server.stderr.read()[-2000:]}")
            return None
        host, port = line.strip().rsplit("tcp://", 1)[1].rsplit(":", 1)
        clients = [AbciClient(host, int(port)) for _ in ("query", "snapshot", "mempool", "consensus")]
        consensus = clients[-1]
        consensus.call("info", abci.RequestInfo(version="bench"))
        genesis_time = Timestamp(seconds=GENESIS_TIME_NS // 10**9)
        consensus.call("init_chain", abci.RequestInitChain(
            time=genesis_time, chain_id=CHAIN_ID, initial_height=1, app_state_bytes=app_state))

        def finalize_and_commit(height: int, txs: list[bytes]) -> None:
            env = block_env(height)
            answer = consensus.call("finalize_block", abci.RequestFinalizeBlock(
                txs=txs, height=height, time=Timestamp(seconds=env.time_ns // 10**9),
                hash=hashlib.sha256(b"block %d" % height).digest()))
            failed = [r for r in answer.tx_results if r.code != 0]
            if failed or len(answer.tx_results) != len(txs):
                raise RuntimeError(f"block {height}: {len(failed)} transactions failed: {failed[:1]}")
            if answer.app_hash != expected[height - 1]:
                raise RuntimeError(f"block {height}: socket app hash {answer.app_hash.hex()} differs from the "
                                   f"in-process {expected[height - 1].hex()}")
            consensus.call("commit", abci.RequestCommit())

        finalize_and_commit(1, blocks[0])
        watch = Stopwatch(lambda: [server.pid] + child_pids(server.pid))
        for offset, txs in enumerate(blocks[1:]):
            ceiling.sample()
            watch.start()
            finalize_and_commit(offset + 2, txs)
            watch.stop()
        return watch.rate(sum(len(b) for b in blocks[1:]))
    finally:
        for client in clients:
            client.close()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# -- main ---------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chain_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer accounts and blocks (about a minute)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the in-process run to stderr")
    parser.add_argument("--accounts", type=int, help="override the number of funded accounts")
    parser.add_argument("--blocks", type=int, help="override the number of timed blocks")
    parser.add_argument("--block-size", type=int, help="override the transactions per block")
    arguments = parser.parse_args(argv)
    config = QUICK if arguments.quick else FULL
    block_size = arguments.block_size or config.block_size
    config = Config(arguments.accounts or config.accounts, arguments.blocks or config.blocks, block_size,
                    min(config.warmup_size, block_size))

    started = time.perf_counter()
    accounts = make_keys(config.accounts, b"account")
    operator, consensus_key = make_keys(1, b"operator")[0], make_keys(1, b"consensus")[0]
    app_state = json.dumps(genesis_app_state(accounts, operator, consensus_key)).encode()
    blocks = sign_blocks(accounts, [config.warmup_size] + [config.block_size] * config.blocks)
    # A node holds no signing keys: drop them (and genesis as objects) so the measured process does not
    # carry 100,000 key objects that the garbage collector would walk over again and again.
    del accounts, operator, consensus_key
    gc.collect()
    bech32_encode_bytes.cache_clear()  # writing genesis encoded every address; a node starts with none cached
    log(f"{config.accounts} accounts, {config.blocks} timed blocks of {config.block_size} signed sends "
        f"(+1 warm-up block of {config.warmup_size}); set up in {time.perf_counter() - started:.1f}s")

    ceiling = Ceiling(blocks[1][:3000])
    ceiling.sample(1000)
    log(f"ed25519 verify (PyNaCl, one core): {ceiling.rate().per_wall_second:,.0f}/s at the start "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    timed = sum(len(b) for b in blocks[1:])
    with tempfile.TemporaryDirectory(prefix="trolly-bench-") as workdir:
        one_core, hashes = run_in_process(os.path.join(workdir, "one-core"), app_state, blocks, ceiling,
                                          profile=False, checker=False)
        log(f"in process, every signature checked in this process (one core): {one_core.per_wall_second:,.0f} "
            f"tx/s ({one_core.per_cpu_second:,.0f} per CPU second)")
        log("  wall time per transaction: "
            + ", ".join(f"{name} {seconds / timed * 1e6:.0f} us" for name, seconds in PHASES.items()))
        bech32_encode_bytes.cache_clear()  # the second run starts as cold as the first
        in_process, checked_hashes = run_in_process(os.path.join(workdir, "in-process"), app_state, blocks,
                                                    ceiling, arguments.profile, checker=True)
        if checked_hashes != hashes:
            raise SystemExit("the app hashes with the signature checker differ from those without it")
        log(f"in process, with the signature checker process (the default): {in_process.per_wall_second:,.0f} "
            f"tx/s ({in_process.per_cpu_second:,.0f} per CPU second of both processes)")
        log("  wall time per transaction: "
            + ", ".join(f"{name} {seconds / timed * 1e6:.0f} us" for name, seconds in PHASES.items()))
        over_socket = run_over_socket(os.path.join(workdir, "socket"), app_state, blocks, hashes, ceiling)
        if over_socket is not None:
            log(f"over the ABCI socket (FinalizeBlock + Commit, app hashes equal in-process): "
                f"{over_socket.per_wall_second:,.0f} tx/s ({over_socket.per_cpu_second:,.0f} per CPU second of "
                f"client, server and its signature checker)")
    verify = ceiling.rate()
    log(f"ed25519 verify over {ceiling.count:,} checks sampled between the blocks: {verify.per_wall_second:,.0f}/s "
        f"({verify.per_cpu_second:,.0f} per CPU second); in process reaches "
        f"{in_process.per_wall_second / verify.per_wall_second:.0%} of it by the wall clock "
        f"({one_core.per_wall_second / verify.per_wall_second:.0%} on one core), "
        f"{in_process.per_cpu_second / verify.per_cpu_second:.0%} by CPU time "
        f"(targets: 50% in process, 5,000 tx/s over the socket); load average {os.getloadavg()[0]:.1f}")
    print(json.dumps({
        "tx_per_s_in_process": round(in_process.per_wall_second),
        "tx_per_s_socket": None if over_socket is None else round(over_socket.per_wall_second),
        "tx_per_s_in_process_one_core": round(one_core.per_wall_second),
        "ed25519_verify_per_s": round(verify.per_wall_second),
        "accounts": config.accounts,
    }))


if __name__ == "__main__":
    main()
