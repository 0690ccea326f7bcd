"""The soak's stream of training tasks, and the workers killed mid-round, in a thread of its own.

One task at a time, each wanting every worker: the demo's MLP on the bundled digits (`localnet.demo_tasks`),
`TASK_ROUNDS` rounds, served by the requester's own blob server and submitted with the requester library (as
the demo does). When a task ends the next is submitted, until the stream is stopped. Worker-0 cheats (the
localnet's `cheat` switch), so every task has a cheater; every `KILL_EVERY`-th task, once it runs, an honest
worker is SIGKILLed mid-round and started again `WORKER_DOWN_SECONDS` later (it resumes from its saved
progress, or has missed its round's deadline and is dropped, with a penalty but never a slash).

At the end every task's members are read from the chain: a cheater is a member that is worker-0, an honest
worker any other; a member whose collateral was slashed (`slashed` > 0 or status `slashed`) counts as slashed.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path

from trolly.compute.blobs import BlobServer
from trolly.localnet.demo_tasks import digits_data, digits_spec
from trolly.localnet.network import Localnet
from trolly.wallet.keyring import Keyring
from trolly.wallet.requester import TaskOrder, sending_with, submit_task
from trolly.wallet.rpc import AsyncRpcClient, RpcClient

from ._soak_net import PRUNED_NODE

TASK_ROUNDS = 2
TASK_BUDGET = 20_000_000
ROUND_BLOCKS = 60
"""Blocks a round's commit phase stays open (the demo's digits window)."""
JOIN_BLOCKS = 200
"""Blocks a task waits for its workers: long enough for a worker killed in the previous task to come back."""
KILL_EVERY = 2
"""Every second task (the 2nd, 4th, ...) has an honest worker killed mid-round."""
WORKER_DOWN_SECONDS = 8.0
ENDED = ("completed", "cancelled", "expired", "abandoned", "failed")


class TaskStream(threading.Thread):
    def __init__(self, net: Localnet) -> None:
        super().__init__(daemon=True, name="soak-tasks")
        self.net = net
        self.stop_event = threading.Event()
        self.submitted: list[int] = []
        self.worker_kills: list[dict] = []
        self.error: BaseException | None = None
        keyring = Keyring(net.layout.wallet_home, backend="test")
        self.requester = keyring.signer("requester")
        self.cheater = keyring.get("worker-0").address
        self.honest = {keyring.get(f"worker-{i}").address: f"worker-{i}" for i in range(1, net.config.workers)}

    def run(self) -> None:
        try:
            asyncio.run(self.stream())
        except BaseException as error:  # reported in the JSON line
            self.error = error

    def stop(self, wait_seconds: float) -> None:
        """No more submissions; wait up to `wait_seconds` for the live task to end."""
        self.stop_event.set()
        self.join(timeout=wait_seconds)

    async def stream(self) -> None:
        with tempfile.TemporaryDirectory(prefix="trolly-soak-data-") as scratch:
            data = digits_data(Path(scratch))
            config = self.net.config
            async with BlobServer(data.store, port=config.data_port()) as server, \
                    AsyncRpcClient(config.rpc_url(PRUNED_NODE), timeout=10.0) as client:
                spec = digits_spec(data.section(server.url), TASK_ROUNDS)
                send = sending_with(client, self.requester, timeout=60.0)
                while not self.stop_event.is_set():
                    order = TaskOrder(spec, TASK_BUDGET, config.workers, join_blocks=JOIN_BLOCKS,
                                      round_blocks=ROUND_BLOCKS)
                    try:
                        task_id = (await submit_task(client, order, send)).task_id
                    except Exception:  # the node busy or a block slow: submit again
                        await asyncio.sleep(2.0)
                        continue
                    self.submitted.append(task_id)
                    await self.follow(client, task_id, kill=len(self.submitted) % KILL_EVERY == 0)

    async def follow(self, client: AsyncRpcClient, task_id: int, kill: bool) -> None:
        """Until the task ends (whether or not the stream was stopped meanwhile): kill a worker when due."""
        while True:
            try:
                task = await client.query_json(f"/market/task/{task_id}")
            except Exception:
                await asyncio.sleep(2.0)
                continue
            if task["status"] in ENDED:
                return
            if kill and task["status"] == "running" and await asyncio.to_thread(self.kill_honest_member, task):
                kill = False
            await asyncio.sleep(1.0)

    def kill_honest_member(self, task: dict) -> bool:
        """SIGKILL the first active honest member, wait, start it again; False if none is active."""
        active = [m["worker"] for m in task["members"] if m["status"] == "active" and m["worker"] in self.honest]
        if not active:
            return False
        name = self.honest[active[0]]
        self.net.kill(name)
        self.worker_kills.append({"task": task["id"], "worker": name, "round": task["round"]})
        time.sleep(WORKER_DOWN_SECONDS)
        self.net.start(name)
        return True

    def tally(self) -> dict:
        """The tasks' outcomes and who was slashed, read from the chain now."""
        counts = {"tasks_submitted": len(self.submitted), "tasks_completed": 0, "tasks_by_status": {},
                  "cheaters_slashed": 0, "cheater_memberships": 0, "honest_workers_slashed": 0,
                  "honest_workers_dropped": 0, "worker_kills": len(self.worker_kills)}
        with RpcClient(self.net.config.rpc_url(PRUNED_NODE), timeout=10.0) as client:
            for task_id in self.submitted:
                task = client.query_json(f"/market/task/{task_id}")
                status = task["status"]
                counts["tasks_by_status"][status] = counts["tasks_by_status"].get(status, 0) + 1
                counts["tasks_completed"] += status == "completed"
                for member in task["members"]:
                    slashed = member["status"] == "slashed" or int(member.get("slashed", 0)) > 0
                    if member["worker"] == self.cheater:
                        counts["cheater_memberships"] += 1
                        counts["cheaters_slashed"] += slashed
                    else:
                        counts["honest_workers_slashed"] += slashed
                        counts["honest_workers_dropped"] += member["status"] == "dropped"
        return counts
