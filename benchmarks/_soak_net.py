"""The soak's network: a 4-validator CometBFT localnet shaped for faults, and the faults done to it.

Shape (written into every node's genesis and config.toml before the first start):

- liveness: a window of `DOWNTIME["signed_blocks_window"]` commits of which half must be signed, so that a
  validator whose CometBFT is paused (SIGSTOP) is jailed within seconds, and a short jail so that it can be
  unjailed within the soak;
- the market's verification window shortened to `VERIFICATION_WINDOW`, which lowers the app's retention floor
  (`abci_app.retention`: it keeps every block a round's votes and reveals still need), and evidence expiring
  after `EVIDENCE_MAX_AGE_BLOCKS` blocks and one second (CometBFT keeps every header evidence may still name,
  whichever of the two ages is longer): with both, pruning starts within minutes;
- every node prunes (`PRUNED`) but validator-2, which keeps every block and every version of its state
  (`UNPRUNED`): the soak compares the two nodes' disk, side by side, under the same load.

Faults: a node killed and started again (`Localnet.kill`/`start`), a CometBFT paused and continued (SIGSTOP and
SIGCONT of its process), an operator's unjail, a fresh node joining by state sync (`trolly-node init
--state-sync`), a worker killed mid-round. Power is 40/30/20/10 %: validator-0 is never stopped (the others hold
60 % without it, less than two thirds), and two faults that stop validators never overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import plyvel
import tomli_w

from trolly.abci_app.store import Store
from trolly.chain.app import check_invariants
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.module import InvariantBroken
from trolly.chain.state import State
from trolly.localnet.home_layout import LocalnetConfig
from trolly.localnet.network import Localnet
from trolly.wallet.rpc import AsyncRpcClient, RpcClient
from trolly.wallet.sender import TxSender
from trolly.wallet.txbuilder import unjail_message

BIN = Path(sys.executable).parent
BLOCK_TIME = "500ms"
"""CometBFT's timeout_commit: slow enough that 4 validators, their verifiers and 3 workers share 2 cores."""

DOWNTIME = {"signed_blocks_window": 20, "min_signed_per_window_bps": 5_000, "downtime_jail_blocks": 30,
            "slash_fraction_downtime_bps": 100, "halt_reset_seconds": 300}
"""A paused validator misses its 11th commit of 20 a few seconds in and is jailed for 30 blocks (1 % burned)."""

VERIFICATION_WINDOW = 80
"""Blocks a round's segments wait for verdicts (the localnet's 180 keeps 370 blocks): the digits MLP replays in
seconds, and a segment is decided as soon as two thirds of its committee voted."""

EVIDENCE_MAX_AGE_BLOCKS = 100

PRUNED = {"min_retain_blocks": 100, "state_keep_recent": 50, "snapshot_interval": 20, "snapshot_keep_recent": 2}
UNPRUNED = {"min_retain_blocks": 0, "state_keep_recent": 1_000_000_000, "snapshot_interval": 20,
            "snapshot_keep_recent": 2}
UNPRUNED_NODE = 2
PRUNED_NODE = 0
KILLED_NODE = 1
PAUSED_NODE = 3


def free_base_port(nodes: int, workers: int) -> int:
    """A base port (below the kernel's ephemeral range) whose every localnet port can be bound now."""
    for base in range(30_800, 20_000, -200):
        config = LocalnetConfig(validators=nodes, workers=workers, base_port=base)
        try:
            for port in config.ports():
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise SystemExit("no free block of ports in 20000..30800")


def soak_config(workers: int, cheat: str) -> LocalnetConfig:
    """4 validators, `workers` workers of which worker-0 cheats with `cheat`; ports free for a fifth node."""
    return LocalnetConfig(validators=4, workers=workers, slow_workers=0, block_time=BLOCK_TIME, cheat=cheat,
                          base_port=free_base_port(nodes=5, workers=workers))


def shape_network(net: Localnet) -> None:
    """Before the first start: every node's genesis alike (liveness, market window, evidence age) and each node's
    [trolly] options (validator-2 unpruned)."""
    net.ensure_initialized()
    for index in range(net.config.nodes):
        home = net.layout.node_home(index)
        genesis_path = home / "config" / "genesis.json"
        genesis = json.loads(genesis_path.read_text())
        genesis["app_state"]["params"]["slashing"] = dict(DOWNTIME)
        genesis["app_state"]["params"]["market"]["verification_window"] = VERIFICATION_WINDOW
        genesis["consensus_params"]["evidence"].update(max_age_num_blocks=str(EVIDENCE_MAX_AGE_BLOCKS),
                                                       max_age_duration="1000000000")
        genesis_path.write_text(json.dumps(genesis, indent=2))
        set_node_options(home, UNPRUNED if index == UNPRUNED_NODE else PRUNED)


def set_node_options(node_home: Path, options: dict[str, int]) -> None:
    path = node_home / "config" / "config.toml"
    config = tomllib.loads(path.read_text())
    config.setdefault("trolly", {}).update(options)
    path.write_text(tomli_w.dumps(config))


PRUNED_STORES = ("blockstore.db", "state.db", "application.db")
"""The stores pruning deletes from: CometBFT's blocks and per-height state, the app's undo log. (CometBFT's
transaction index and consensus WAL are not pruned by `retain_height`; every node's are alike.)"""


def stored_bytes(node_home: Path) -> dict[str, int]:
    """Bytes each pruned store of a stopped node holds: the keys and values of its live entries. Its files lag
    behind: LevelDB writes a delete as a tombstone and frees the space only when it compacts, on its own
    schedule, so over a short soak a pruned node's files are as large as an unpruned one's."""
    sizes = {}
    for name in PRUNED_STORES:
        database = plyvel.DB(str(node_home / "data" / name))
        try:
            sizes[name] = sum(len(key) + len(value) for key, value in database.iterator())
        finally:
            database.close()
    return sizes


def operator(index: int) -> str:
    return encode_address(dev_key(index).address)


def query(net: Localnet, index: int, path: str):
    with RpcClient(net.config.rpc_url(index), timeout=5.0) as client:
        return client.query_json(path)


def wait_until(condition, timeout: float, what: str, interval: float = 1.0):
    """Poll `condition()` (errors count as not yet) until it is truthy; return it, or raise naming `what`."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as error:  # a node restarting: keep polling
            last_error = error
        time.sleep(interval)
    raise SoakFailure(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})")


class SoakFailure(Exception):
    """A fault did not have the effect the soak waits for (a validator not jailed, a node not caught up)."""


# ------------------------------------------------------------------------------------------------- invariants


def store_invariant_failures(node_home: Path) -> list[str]:
    """Every module's invariants on a stopped node's own store ([] when all hold)."""
    with Store(node_home / "data" / "application.db") as store:
        try:
            check_invariants(State(store.reader()))
        except InvariantBroken as broken:
            return [f"{node_home.name} at height {store.last_height}: {broken}"]
    return []


# ------------------------------------------------------------------------------------------------- faults


def kill_and_restart(net: Localnet, index: int, down_seconds: float) -> dict:
    """SIGKILL a validator's node (app, CometBFT, verifier), check its store's invariants while it is down,
    start it again and wait until it caught up. Returns what happened."""
    name = net.config.node_name(index)
    killed = net.kill(name)
    time.sleep(1.0)
    failures = store_invariant_failures(net.layout.node_home(index))
    time.sleep(down_seconds)
    net.start(name)
    started = time.monotonic()
    wait_until(lambda: net.height(index) >= net.height(PRUNED_NODE) - 1, 180, f"{name} to catch up")
    return {"node": name, "killed": killed, "invariant_failures_while_down": failures,
            "catch_up_seconds": round(time.monotonic() - started, 1)}


def signal_service(net: Localnet, service: str, sig: int) -> None:
    record = net.supervisor.records()[service]
    os.kill(record["pid"], sig)


def pause_until_jailed(net: Localnet, index: int) -> dict:
    """SIGSTOP validator `index`'s CometBFT (its app and verifier run on) until the chain jails it for downtime,
    then SIGCONT it and wait until it caught up. Returns its record before and after."""
    who = operator(index)
    before = query(net, PRUNED_NODE, f"/validator/{who}")
    service = f"cometbft-{index}"
    signal_service(net, service, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        wait_until(lambda: query(net, PRUNED_NODE, f"/validator/{who}")["jailed"], 240,
                   f"validator-{index} to be jailed for downtime")
    finally:
        signal_service(net, service, signal.SIGCONT)
    paused_seconds = time.monotonic() - paused
    jailed = query(net, PRUNED_NODE, f"/validator/{who}")
    info = query(net, PRUNED_NODE, f"/signing_info/{who}")
    wait_until(lambda: net.height(index) >= net.height(PRUNED_NODE) - 1, 180, f"validator-{index} to catch up")
    return {"node": net.config.node_name(index), "paused_seconds": round(paused_seconds, 1),
            "stake_before": before["stake"], "stake_jailed": jailed["stake"], "jailed": jailed["jailed"],
            "jailed_until": info["jailed_until"]}


def unjail(net: Localnet, index: int, jailed_until: int) -> dict:
    """Once the jail time has passed, validator `index`'s operator sends MsgUnjail; wait until it has power."""
    wait_until(lambda: net.height(PRUNED_NODE) >= jailed_until, 240, "the jail time to pass")

    async def send() -> int:
        async with AsyncRpcClient(net.config.rpc_url(PRUNED_NODE), timeout=10.0) as client:
            sender = TxSender(client)
            key = dev_key(index)
            plan = await sender.plan(encode_address(key.address), [unjail_message()])
            outcome = await sender.send(key, plan, timeout=60.0)
            return outcome.included.height

    height = asyncio.run(send())
    back = wait_until(lambda: (v := query(net, PRUNED_NODE, f"/validator/{operator(index)}"))["power"] > 0 and v,
                      60, f"validator-{index} to have power again")
    return {"unjailed_at_height": height, "power_after": back["power"], "jailed_after": back["jailed"]}


@dataclass(frozen=True)
class Joined:
    index: int
    seconds: float
    """From `trolly-node init --state-sync` to the node at the validators' height."""
    earliest_height: int
    """The first block in its store: after genesis, since it restored a snapshot."""
    app_hash_agrees: bool


def join_by_state_sync(net: Localnet) -> Joined:
    """Add a node, init it with `--state-sync` from two validators' RPCs, start it, wait until it is at the
    validators' height, and compare its app hash with validator-0's at its latest height."""
    name = net.add_node()
    index = net.config.nodes - 1
    home = net.layout.node_home(index)
    started = time.monotonic()
    rpcs = f"{net.config.rpc_url(0)},{net.config.rpc_url(1)}"
    subprocess.run([str(BIN / "trolly-node"), "init", "--home", str(home), "--state-sync", rpcs],
                   check=True, capture_output=True, text=True, timeout=120)
    set_node_options(home, PRUNED)
    net.start(name)
    wait_until(lambda: net.height(index) >= net.height(PRUNED_NODE) - 1, 300, f"{name} to catch up by state sync")
    seconds = time.monotonic() - started
    with RpcClient(net.config.rpc_url(index), timeout=5.0) as client:
        earliest = int(client.call("status")["sync_info"]["earliest_block_height"])
    height = net.height(index) - 1
    agrees = net.app_hash_at(index, height) == net.app_hash_at(PRUNED_NODE, height)
    return Joined(index, round(seconds, 1), earliest, agrees)
