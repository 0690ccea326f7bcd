"""A soak under faults: the 4-validator CometBFT localnet runs a stream of tasks while it is broken on purpose.

    python -m benchmarks.soak [--minutes N] [--quick] [--home DIR]

Real processes throughout (`localnet.network.Localnet`): 4 validators (app, CometBFT, verifier each) and 3
workers, worker-0 cheating (`skipped_steps`). For N minutes (`--quick`: a short soak, a few minutes in all):

1. tasks one after another, each wanting every worker, so each has a cheater; every second one has an
   honest worker SIGKILLed mid-round and started again (`_soak_tasks.py`);
2. at 10 % of the time validator-1's node is SIGKILLed, its store's invariants checked while it is down, and
   started again; at 25 % validator-3's CometBFT is paused (SIGSTOP) until the chain jails it for downtime,
   continued (SIGCONT), and once its jail time passed its operator unjails it; at 50 % a fresh node joins by
   state sync (`trolly-node init --state-sync`) and must reach the validators' app hash; in a full soak, at
   75 % validator-2's node is killed and restarted too (`_soak_net.py`);
3. all along (`_soak_watch.py`): every node's block and app hash at every height compared, the total supply
   against the supply first read minus the burns the blocks' events name, block times;
4. at the end, with every process stopped, every module's invariants run on every node's store, and the
   bytes held by the stores pruning deletes from measured on a pruned validator and on validator-2, which keeps every block and
   every version of its state.

The JSON line last: tasks submitted and completed, cheaters and honest workers slashed, invariant failures,
supply drift, app hash disagreements, the largest gap between blocks, disk bytes per 1,000 blocks with pruning
and without (`disk_per_thousand_blocks`), the state-sync join seconds, and what each fault did. `ok` is true when every count that must be
zero is zero and every fault happened as planned.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from trolly.abci_app.node_options import NodeOptions
from trolly.abci_app.retention import Retention
from trolly.localnet.network import Localnet

from ._soak_net import (EVIDENCE_MAX_AGE_BLOCKS, KILLED_NODE, PAUSED_NODE, PRUNED, PRUNED_NODE, UNPRUNED_NODE,
                        VERIFICATION_WINDOW, SoakFailure, stored_bytes, join_by_state_sync,
                        kill_and_restart, pause_until_jailed, shape_network, soak_config, store_invariant_failures,
                        unjail)
from ._soak_tasks import TaskStream
from ._soak_watch import Watcher

QUICK_SECONDS = 240.0
"""A quick soak's faulty period: long enough for every fault once and for the pruned node's window to fill."""
WORKERS = 3
CHEAT = "skipped_steps"
NODE_DOWN_SECONDS = 15.0
LAST_TASK_SECONDS = 180.0
"""After the faulty period: how long the live task may take to end before the soak stops counting."""
REVEAL_WINDOW = 10
"""The market's default reveal window (the soak's genesis keeps it)."""


def pruned_window() -> int:
    """Blocks the pruned nodes keep: their `min_retain_blocks` raised to the retention floors."""
    retention = Retention.from_options(NodeOptions(**PRUNED), {"consensus_params": {"evidence": {
        "max_age_num_blocks": EVIDENCE_MAX_AGE_BLOCKS}}})
    return retention.blocks_kept(2 * VERIFICATION_WINDOW + REVEAL_WINDOW)


def disk_per_thousand_blocks(net: Localnet, height: int) -> dict:
    """With every process stopped: the bytes the pruned stores of a pruned validator and of the unpruned one
    hold (`_soak_net.stored_bytes`), per 1,000 blocks of the chain's height. The unpruned node's figure is
    what every 1,000 blocks cost without pruning; the pruned node holds a bounded window, so its figure falls
    as the chain grows (its total stays put)."""
    pruned = stored_bytes(net.layout.node_home(PRUNED_NODE))
    unpruned = stored_bytes(net.layout.node_home(UNPRUNED_NODE))
    return {"disk_height": height,
            "disk_bytes_per_1000_blocks_pruned": round(sum(pruned.values()) * 1000 / height),
            "disk_bytes_per_1000_blocks_unpruned": round(sum(unpruned.values()) * 1000 / height),
            "disk_store_bytes": {"pruned": pruned, "unpruned": unpruned}}


def attempt(faults: dict, name: str, action) -> None:
    """Run one fault; a fault that did not take effect is recorded as its error (the soak goes on)."""
    try:
        faults[name] = action()
    except SoakFailure as failure:
        faults[name] = {"error": str(failure)}


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def break_things(net: Localnet, seconds: float, quick: bool) -> dict:
    """The faults on their schedule over `seconds` (each waits for the one before to end)."""
    start = time.monotonic()
    faults: dict = {}
    sleep_until(start + 0.10 * seconds)
    attempt(faults, "validator_killed", lambda: kill_and_restart(net, KILLED_NODE, NODE_DOWN_SECONDS))
    sleep_until(start + 0.25 * seconds)
    attempt(faults, "validator_paused", lambda: pause_until_jailed(net, PAUSED_NODE))
    if "jailed_until" in faults["validator_paused"]:
        attempt(faults, "validator_unjailed", lambda: unjail(net, PAUSED_NODE, faults["validator_paused"]["jailed_until"]))
    sleep_until(start + 0.50 * seconds)
    attempt(faults, "state_sync_join", lambda: vars(join_by_state_sync(net)))
    if not quick:
        sleep_until(start + 0.75 * seconds)
        attempt(faults, "unpruned_validator_killed", lambda: kill_and_restart(net, UNPRUNED_NODE, NODE_DOWN_SECONDS))
    sleep_until(start + seconds)
    return faults


def faults_happened(faults: dict, tally: dict) -> dict[str, bool]:
    """Each planned fault, and whether it had its effect."""
    paused = faults.get("validator_paused", {})
    joined = faults.get("state_sync_join", {})
    return {
        "validator_killed_and_caught_up": "catch_up_seconds" in faults.get("validator_killed", {}),
        "paused_validator_jailed_and_slashed": bool(paused.get("jailed"))
        and paused.get("stake_jailed", 0) < paused.get("stake_before", 0),
        "paused_validator_unjailed": faults.get("validator_unjailed", {}).get("jailed_after") is False,
        "state_synced_node_same_app_hash": bool(joined.get("app_hash_agrees")) and joined.get("earliest_height", 0) > 1,
        "worker_killed_mid_round": tally["worker_kills"] > 0,
        "cheater_slashed": tally["cheaters_slashed"] > 0,
    }


def run_soak(home: Path, seconds: float, quick: bool) -> dict:
    started = time.monotonic()
    net = Localnet(home, soak_config(WORKERS, CHEAT))
    shape_network(net)
    watcher = tasks = None
    try:
        net.up(timeout=180)
        net.kill("console")  # nobody looks at it; its CPU is the workers'
        up_seconds = time.monotonic() - started
        watcher, tasks = Watcher(net), TaskStream(net)
        watcher.start()
        tasks.start()
        faults = break_things(net, seconds, quick)
        tasks.stop(LAST_TASK_SECONDS)
        watcher.stop()
        tally = tasks.tally()
        nodes = net.config.nodes
    finally:
        if tasks is not None:
            tasks.stop_event.set()
        if watcher is not None:
            watcher.stop_event.set()
        net.down()
    invariant_failures = [f for index in range(nodes) for f in store_invariant_failures(net.layout.node_home(index))]
    invariant_failures += faults.get("validator_killed", {}).get("invariant_failures_while_down", [])
    invariant_failures += faults.get("unpruned_validator_killed", {}).get("invariant_failures_while_down", [])
    observations = watcher.observations
    window = pruned_window()
    happened = faults_happened(faults, tally)
    result = {
        "benchmark": "soak", "quick": quick, "soak_seconds": round(seconds), "up_seconds": round(up_seconds, 1),
        "seconds": round(time.monotonic() - started, 1), "nodes": nodes, "workers": WORKERS, "cheat": CHEAT,
        **tally,
        "invariant_failures": len(invariant_failures), "invariant_failure_details": invariant_failures[:5],
        "invariant_checks": nodes + sum(1 for k in ("validator_killed", "unpruned_validator_killed") if k in faults),
        "supply_drift": observations.supply_drift, "supply_checks": observations.supply_checks,
        "burned_utrl": observations.burned_total(),
        "app_hash_disagreements": len(observations.disagreements()),
        "disagreeing_heights": observations.disagreements()[:10],
        "heights_compared": observations.heights_compared(),
        "blocks": max(observations.headers, default=0),
        "max_block_seconds": observations.max_block_seconds(),
        "pruned_window_blocks": window, **disk_per_thousand_blocks(net, max(observations.headers, default=1)),
        "state_sync_join_seconds": faults.get("state_sync_join", {}).get("seconds"),
        "faults": faults, "faults_happened": happened,
        "task_stream_error": repr(tasks.error) if tasks.error else None,
        "worker_kill_log": tasks.worker_kills,
    }
    result["ok"] = (all(happened.values()) and result["honest_workers_slashed"] == 0
                    and result["invariant_failures"] == 0 and result["supply_drift"] == 0
                    and result["app_hash_disagreements"] == 0 and result["supply_checks"] > 0
                    and result["tasks_completed"] > 0)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="the faulty period, in minutes (default 10)")
    parser.add_argument("--quick", action="store_true", help=f"a short soak: {QUICK_SECONDS:.0f} s of faults")
    parser.add_argument("--home", type=Path, default=None, help="keep the localnet here (default: a temporary one)")
    arguments = parser.parse_args(argv)
    seconds = QUICK_SECONDS if arguments.quick else arguments.minutes * 60
    if seconds < QUICK_SECONDS:
        parser.error(f"a soak needs at least {QUICK_SECONDS / 60:g} minutes for every fault to happen once")
    if arguments.home is not None:
        result = run_soak(arguments.home / "net", seconds, arguments.quick)
    else:
        with tempfile.TemporaryDirectory(prefix="trolly-soak-") as scratch:
            result = run_soak(Path(scratch) / "net", seconds, arguments.quick)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
