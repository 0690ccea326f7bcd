"""Network throughput: signed transfers at a rising rate into 4 CometBFT validators running Trolly, 4 running
CometBFT's `kvstore` app, 4 running an app that does nothing (and one that only checks signatures), and the
solo engine.

    python -m benchmarks.network_throughput [--quick] [--networks trolly,kvstore,noop,sigcheck,solo] ...

Workload. Genesis funds one account per transaction of the largest step; every transaction is a 1 utrl
`MsgSend` signed with the account's ed25519 key, all signed before any network starts (an account sends once
per step, its nonce counting the steps it sent in before, which are committed by then). The kvstore app gets
`key=value` transactions of the same size, each key used once. The `noop` network (`benchmarks._noop_app`:
Trolly's ABCI server in its own process, as the Trolly apps are, with an app that admits and "executes"
everything without work) gets the Trolly transactions: what it sustains is the ceiling of any app served out
of process on this machine, so that the Trolly figure can be read against both anchors. The `sigcheck`
network is `noop` with one piece of work: each new transaction decoded and its ed25519 signature checked,
which every validator must do whatever its state machine, so it bounds any app that checks signatures.

Steps. Each network, started fresh (`benchmarks._network_nets`), gets the same ladder of rates (tx/s), each
held for `--hold` seconds: transaction i of a step is due at start + i / rate and is submitted with
`broadcast_tx_sync` over keep-alive connections spread evenly over the validators' RPC ports, from sender
processes of their own (`benchmarks._network_load`). Its commit latency runs from its submission to the
arrival of the `NewBlockHeader` event of the block carrying it, on validator 0. A step is sustained when
every transaction was accepted and committed, the p99 latency is at most `MAX_P99_SECONDS`, and the senders
kept the rate (at least `MIN_PACE` of it: `broadcast_tx_sync` answers after CheckTx, so a node slow to admit
transactions holds its senders back). The ladder stops at the first step not sustained; a network's figure is
its highest sustained rate.

The senders' own capacity is measured on kvstore (the cheapest app) with every transaction due at once: if it
is not well above a network's figure, that figure is the client's, not the network's. CPU seconds per step
are reported by role (cometbft, app, engine, senders, observer) next to the whole machine's, which other
work shares. The last line is JSON: `tx_per_s_trolly`, `tx_per_s_kvstore`, `tx_per_s_solo`,
`ratio_to_kvstore`, `p99_latency_s` (of Trolly's highest sustained step), `tx_per_s_noop`,
`noop_ratio_to_kvstore` and `tx_per_s_sigcheck`, then the settings and every step.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from benchmarks._network_load import BlockObserver, Senders, rpc_body
from benchmarks._network_nets import CometbftSettings, Network, start_cometbft_network, start_solo
from trolly.abci_app.cometbft import CometbftError, find_cometbft
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.params import AuthParams
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.tx import build_tx

CHAIN_ID = "bench-network"
MAX_P99_SECONDS = 3.0
MIN_PACE = 0.95
DRAIN_SECONDS = 10.0
"""How long after its last submission a step waits for its transactions to commit; any still missing is lost."""
NETWORKS = ("trolly", "kvstore", "noop", "sigcheck", "solo")

FULL_RATES = (100, 200, 300, 400, 600, 800, 1000, 1200, 1600, 2000, 2400, 3000, 3600, 4400, 5200, 6000)
QUICK_RATES = (250, 400, 600, 1000, 1500, 2200, 3000, 4400)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Workload:
    """Per step, the Trolly transactions (signed) and the kvstore transactions of the same sizes."""

    rates: tuple[int, ...]
    hold: float
    accounts: dict[str, int]
    trolly: list[list[bytes]]
    tx_bytes: int

    def step_size(self, rate: int) -> int:
        return max(1, round(rate * self.hold))

    def kvstore(self, step: int) -> list[bytes]:
        txs = []
        for index in range(self.step_size(self.rates[step])):
            key = f"s{step}k{index}=".encode()
            txs.append(key + b"v" * max(1, self.tx_bytes - len(key)))
        return txs


def build_workload(rates: tuple[int, ...], hold: float, trolly_rates: tuple[int, ...]) -> Workload:
    """Sign every Trolly transaction of the steps in `trolly_rates` (the ladder below the last Trolly may reach)."""
    sizes = [max(1, round(rate * hold)) for rate in trolly_rates]
    keys = [PrivateKey(hashlib.sha256(b"trolly/network-bench/" + i.to_bytes(4, "big")).digest())
            for i in range(max(sizes))]
    recipient = PrivateKey(b"\x07" * 32).address
    probe = build_tx(keys[0], CHAIN_ID, 0, 10**9, [MsgSend(to=recipient, amount=1)])
    fee = AuthParams().minimum_fee(len(probe) + 8)  # a few bytes of slack: the fee's own varint may grow
    nonces = [0] * len(keys)
    steps = []
    for size in sizes:
        step = []
        for index in range(size):
            step.append(build_tx(keys[index], CHAIN_ID, nonces[index], fee, [MsgSend(to=recipient, amount=1)]))
            nonces[index] += 1
        steps.append(step)
    balance = (fee + 1) * len(sizes) + 1
    accounts = {encode_address(key.address): balance for key in keys}
    return Workload(rates, hold, accounts, steps, len(steps[0][0]))


# ----------------------------------------------------------------------------------------------------- steps


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (infinity counts: a lost transaction makes every high percentile infinite)."""
    if not values:
        return math.inf
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def machine_busy_seconds() -> tuple[float, float]:
    """(busy CPU seconds, all CPU seconds) of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    ticks = 100.0
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


async def wait_for_blocks(network: Network, height: int = 2, timeout: float = 90.0) -> None:
    """Until every node of `network` has made block `height`."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        for port in network.rpc_ports:
            while True:
                network.check_alive()
                try:
                    async with session.get(f"http://127.0.0.1:{port}/status") as response:
                        status = (await response.json(content_type=None))["result"]
                    if int(status["sync_info"]["latest_block_height"]) >= height:
                        break
                except (aiohttp.ClientError, KeyError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{network.name}: node on port {port} did not reach height {height}")
                await asyncio.sleep(0.2)


async def run_step(network: Network, observer: BlockObserver, senders: Senders, txs: list[bytes], rate: float,
                   lanes: int, method: str) -> dict:
    """Submit `txs` at `rate`, wait for them to commit, and measure."""
    encoded = [base64.b64encode(tx).decode() for tx in txs]
    observer.watch({text: index for index, text in enumerate(encoded)})
    observer.committed.clear()
    items = [(index, index % lanes, rpc_body(index, method, text)) for index, text in enumerate(encoded)]
    cpu_before, busy_before, observer_before = network.cpu_seconds(), machine_busy_seconds(), time.process_time()
    start = time.monotonic() + 0.3
    reports = await asyncio.to_thread(senders.run, network.endpoints, items, rate, start)
    sent = sorted(entry for report in reports for entry in report.sent)
    last_submitted = max(entry[1] for entry in sent)
    accepted = [entry for entry in sent if entry[2]]
    while len(observer.committed) < len(accepted) and time.monotonic() < last_submitted + DRAIN_SECONDS:
        if observer.failure is not None:
            raise RuntimeError(f"{network.name}: the block observer failed: {observer.failure}")
        await asyncio.sleep(0.05)
    wall = time.monotonic() - start
    cpu_after, busy_after = network.cpu_seconds(), machine_busy_seconds()
    observer.watched.clear()
    latencies = [observer.committed[index] - submitted if index in observer.committed else math.inf
                 for index, submitted, _ in sent]
    committed = sum(1 for value in latencies if value != math.inf)
    pace = len(sent) / max(last_submitted - start + 1 / rate, 1e-9)
    result = {
        "rate": rate,
        "sent": len(sent),
        "accepted": len(accepted),
        "committed": committed,
        "lost": len(sent) - committed,
        "submit_rate": round(pace, 1),
        "p50_latency_s": round(percentile(latencies, 0.50), 3) if committed else None,
        "p99_latency_s": round(percentile(latencies, 0.99), 3) if committed == len(sent) else None,
        "cpu_cores": {role: round((cpu_after[role] - cpu_before.get(role, 0.0)) / wall, 2) for role in cpu_after},
        "errors": [error for report in reports for error in report.errors][:3],
    }
    result["cpu_cores"]["senders"] = round(sum(report.cpu_seconds for report in reports) / wall, 2)
    result["cpu_cores"]["observer"] = round((time.process_time() - observer_before) / wall, 2)
    result["cpu_cores"]["machine"] = round((busy_after[0] - busy_before[0]) / wall, 2)
    result["sustained"] = (committed == len(sent) and result["p99_latency_s"] is not None
                           and result["p99_latency_s"] <= MAX_P99_SECONDS and pace >= MIN_PACE * rate)
    return result


def describe(name: str, step: dict) -> str:
    cpu = ", ".join(f"{role} {value}" for role, value in step["cpu_cores"].items())
    verdict = "sustained" if step["sustained"] else "NOT sustained"
    line = (f"{name}: {step['rate']} tx/s offered, {step['submit_rate']} submitted; {step['committed']}/{step['sent']} "
            f"committed; p50 {step['p50_latency_s']} s, p99 {step['p99_latency_s']} s; {verdict}; CPU cores: {cpu}")
    if step["errors"]:
        line += f"; first errors: {step['errors']}"
    return line


async def run_ladder(network: Network, senders: Senders, workload: Workload, lanes: int, method: str) -> list[dict]:
    await wait_for_blocks(network)
    observer = BlockObserver(network.rpc_url(0))
    await observer.start()
    steps = []
    try:
        for number, rate in enumerate(workload.rates):
            if network.name == "kvstore":
                txs = workload.kvstore(number)
            elif number < len(workload.trolly):
                txs = workload.trolly[number]
            else:
                break
            step = await run_step(network, observer, senders, txs, rate, lanes, method)
            network.check_alive()
            log(describe(network.name, step))
            steps.append(step)
            if not step["sustained"]:
                break
    finally:
        await observer.stop()
    return steps


async def client_capacity(network: Network, senders: Senders, count: int, size: int, lanes: int, method: str) -> dict:
    """The senders' ceiling: `count` kvstore transactions of `size` bytes all due at once, accepted per second
    of sending."""
    txs = [f"capacity{index}=".encode().ljust(size, b"v") for index in range(count)]
    items = [(index, index % lanes, rpc_body(index, method, base64.b64encode(tx).decode()))
             for index, tx in enumerate(txs)]
    start = time.monotonic() + 0.3
    reports = await asyncio.to_thread(senders.run, network.endpoints, items, 1e9, start)
    sent = [entry for report in reports for entry in report.sent]
    elapsed = max(entry[1] for entry in sent) - start
    accepted = sum(1 for entry in sent if entry[2])
    cpu = sum(report.cpu_seconds for report in reports)
    return {"tx_per_s": round(accepted / max(elapsed, 1e-9), 1), "accepted": accepted, "sent": len(sent),
            "sender_cpu_cores": round(cpu / max(elapsed, 1e-9), 2)}


# ------------------------------------------------------------------------------------------------------ main


def best(steps: list[dict]) -> dict | None:
    sustained = [step for step in steps if step["sustained"]]
    return sustained[-1] if sustained else None


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a run of a minute or two: fewer, shorter steps")
    parser.add_argument("--rates", default=None, help="comma-separated ladder of tx/s (default: by --quick)")
    parser.add_argument("--hold", type=float, default=None, help="seconds each step lasts (default 10, quick 3)")
    parser.add_argument("--networks", default=",".join(NETWORKS), help=f"which of {','.join(NETWORKS)} to run")
    parser.add_argument("--senders", type=int, default=2, help="sender processes")
    parser.add_argument("--lanes", type=int, default=192, help="keep-alive connections in all, over the nodes")
    parser.add_argument("--method", default="broadcast_tx_sync", choices=("broadcast_tx_sync", "broadcast_tx_async"),
                        help="how transactions are submitted (sync: answered after CheckTx)")
    parser.add_argument("--timeout-commit", default="1s", help="CometBFT timeout_commit (and the solo block time)")
    parser.add_argument("--mempool-size", type=int, default=50_000, help="CometBFT [mempool] size")
    parser.add_argument("--no-recheck", action="store_true", help="CometBFT [mempool] recheck = false")
    parser.add_argument("--capacity-txs", type=int, default=None, help="kvstore txs of the client-capacity probe")
    parser.add_argument("--gossip-sleep", default="100ms",
                        help="CometBFT [consensus] peer_gossip_sleep_duration, for both CometBFT networks")
    parser.add_argument("--workdir", default=None,
                        help="an empty directory to keep the networks' homes and logs in (default: a temporary one)")
    parser.add_argument("--signature-checker", default="on", choices=("on", "off"),
                        help="the Trolly apps' signature checker process (trolly-node start --signature-checker)")
    arguments = parser.parse_args()
    arguments.networks = [name.strip() for name in arguments.networks.split(",") if name.strip()]
    unknown = set(arguments.networks) - set(NETWORKS)
    if unknown or not arguments.networks:
        parser.error(f"--networks takes names among {', '.join(NETWORKS)}, not {arguments.networks}")
    try:
        rates = (tuple(int(rate) for rate in arguments.rates.split(",")) if arguments.rates
                 else QUICK_RATES if arguments.quick else FULL_RATES)
    except ValueError:
        parser.error(f"--rates takes integers separated by commas, not {arguments.rates!r}")
    if not rates or any(rate <= 0 for rate in rates) or list(rates) != sorted(rates):
        parser.error("--rates must be positive and rising")
    arguments.rates = rates
    arguments.hold = arguments.hold if arguments.hold is not None else (3.0 if arguments.quick else 10.0)
    if arguments.hold <= 0 or arguments.senders < 1 or arguments.lanes < 1 or arguments.mempool_size < 1:
        parser.error("--hold, --senders, --lanes and --mempool-size must be positive")
    if arguments.workdir and (not os.path.isdir(arguments.workdir) or os.listdir(arguments.workdir)):
        parser.error(f"--workdir must be an existing empty directory: {arguments.workdir}")
    if arguments.capacity_txs is None:
        arguments.capacity_txs = 6000 if arguments.quick else 20000
    return arguments


async def run_all(arguments, cometbft: str | None, workload: Workload, settings: CometbftSettings,
                  scratch: Path) -> dict:
    results: dict[str, list[dict]] = {}
    capacity = None
    senders = Senders(arguments.senders)
    try:
        for name in arguments.networks:
            log(f"{name}: starting")
            if name == "solo":
                network = start_solo(scratch / name, CHAIN_ID, workload.accounts, settings)
            else:
                network = start_cometbft_network(name, cometbft, scratch / name, CHAIN_ID, workload.accounts,
                                                 settings, app=name)
            try:
                results[name] = await run_ladder(network, senders, workload, arguments.lanes, arguments.method)
                if name == "kvstore" and arguments.capacity_txs:
                    capacity = await client_capacity(network, senders, arguments.capacity_txs, workload.tx_bytes,
                                                    arguments.lanes,
                                                    arguments.method)
                    log(f"client capacity (kvstore, every tx due at once): {capacity}")
            finally:
                network.stop()
    finally:
        senders.close()
    return {"steps": results, "client_capacity": capacity}


def main() -> int:
    arguments = parse_arguments()
    cometbft = None
    if {"trolly", "kvstore", "noop", "sigcheck"} & set(arguments.networks):
        try:
            cometbft = find_cometbft().path
        except CometbftError as exc:
            log(f"cannot run the CometBFT networks: {exc}")
            return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the `finally`s stop every process
    trolly_rates = arguments.rates if set(arguments.networks) - {"kvstore"} else (1,)
    started = time.monotonic()
    workload = build_workload(arguments.rates, arguments.hold, trolly_rates)
    log(f"signed {sum(len(step) for step in workload.trolly)} transfers of {workload.tx_bytes} bytes for "
        f"{len(workload.accounts)} accounts in {time.monotonic() - started:.1f}s")
    settings = CometbftSettings(arguments.timeout_commit, arguments.mempool_size, not arguments.no_recheck,
                                arguments.signature_checker == "on", arguments.gossip_sleep)
    if arguments.workdir:
        outcome = asyncio.run(run_all(arguments, cometbft, workload, settings, Path(arguments.workdir)))
    else:
        with tempfile.TemporaryDirectory(prefix="trolly-network-bench-") as scratch:
            outcome = asyncio.run(run_all(arguments, cometbft, workload, settings, Path(scratch)))
    print(json.dumps(summarize(arguments, settings, workload, outcome)))
    return 0


def summarize(arguments, settings: CometbftSettings, workload: Workload, outcome: dict) -> dict:
    """The JSON line: each network's best sustained rate, the ratio, Trolly's p99, the settings, every step."""
    steps = outcome["steps"]
    rates = {name: (best(steps[name])["rate"] if name in steps and best(steps[name]) else None) for name in NETWORKS}
    trolly_best = best(steps.get("trolly", []))
    return {
        "tx_per_s_trolly": rates["trolly"],
        "tx_per_s_kvstore": rates["kvstore"],
        "tx_per_s_solo": rates["solo"],
        "ratio_to_kvstore": (round(rates["trolly"] / rates["kvstore"], 3)
                             if rates["trolly"] and rates["kvstore"] else None),
        "p99_latency_s": trolly_best["p99_latency_s"] if trolly_best else None,
        "tx_per_s_noop": rates["noop"],
        "noop_ratio_to_kvstore": (round(rates["noop"] / rates["kvstore"], 3)
                                  if rates["noop"] and rates["kvstore"] else None),
        "tx_per_s_sigcheck": rates["sigcheck"],
        "ladder_top_reached": {name: len(steps[name]) == len(arguments.rates) and steps[name][-1]["sustained"]
                               for name in steps},
        "client_capacity": outcome["client_capacity"],
        "settings": {"method": arguments.method, "hold_s": arguments.hold, "senders": arguments.senders,
                     "lanes": arguments.lanes, "timeout_commit": settings.timeout_commit,
                     "mempool_size": settings.mempool_size, "recheck": settings.recheck,
                     "signature_checker": settings.signature_checker,
                     "peer_gossip_sleep": settings.peer_gossip_sleep, "tx_index": "null", "abci": "unix socket",
                     "stakes": "40/30/20/10 %", "tx_bytes": workload.tx_bytes},
        "steps": steps,
    }


if __name__ == "__main__":
    sys.exit(main())
