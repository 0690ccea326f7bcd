"""`trolly-localnet demo`: pay for a real training task on a fresh localnet and watch it settle.

Phases, in order:
1. bring the localnet up (4 validators on CometBFT, each with its app and verifier, by default; one node on
   the solo engine with `--engine solo` or where no CometBFT is found), and three workers, one declared slower;
2. build the task's data (`--task`, `demo_tasks.py`: digits for an MLP; or, for all-MiniLM-L6-v2 fine-tuned
   with LoRA, pydocs written as a JSONL file of texts and packed from it as `trolly-wallet data pack` does,
   private) and serve it from the requester's own blob service (workers may rebuild bundled data locally
   instead; either way its manifest hash must match the spec); while the task runs, private data's key is
   sealed to each member as it joins and to each validator, as `task submit --data` does;
3. submit the task from the `requester` key: the spec, the budget, the reward per round and collateral the
   chain requires (the requester library's `submit_task`, `wallet/requester.py`, as `task submit` and the
   console submit);
4. follow it on chain (the library's `follow_task`, which also delivers a private task's key), one line per
   change: round, commitments, verdicts, payouts; and after each round the global weights recomputed from the
   verified updates and their held-out loss (`observer.py`); with `--churn`, kill members mid-task and watch a
   spare worker replace them (`churn.py`);
5. download the final weights by the hash the chain recorded, from any worker, write them as safetensors into
   the localnet's home (`trolly-wallet task fetch`'s files; for LoRA the adapters and the merged model), and
   evaluate them on the held-out split;
6. print the settlement (each worker's pay, fees, refund, each validator's fee share), checked against account
   balances on chain and the transaction fees each account paid (and the recomputed weights against the chain's
   hashes), and one JSON line last: the task, its id, rounds, final accuracy and the task's accuracy floor, paid
   per worker, the engine, the
   validators (power, fee share), which validators voted what in each round, seconds, and (empty without
   `--churn`) the members killed and the replacements with their slot, first round and pay.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trolly.chain.market.records import COMPLETED, DROPPED, OPEN, SLASHED
from trolly.compute.blobs import AddressPolicy, BlobServer, BlobStore
from trolly.compute.requester.results import evaluate_result, fetch_result, write_result
from trolly.compute.spec import parse_spec
from trolly.wallet.market_queries import get_worker
from trolly.wallet.market_views import TaskView
from trolly.wallet.errors import WalletError
from trolly.wallet.keyring import Keyring
from trolly.wallet.requester import (FollowEvent, KeylessRecipient, KeysDelivered, Looked, TaskOrder, Trouble,
                                     follow_task, sending_with, submit_task)
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import fetch_account_at
from trolly.wallet.staking_views import get_rewards

from .churn import Churn
from .demo_tasks import DEMO_TASKS, DemoTask
from .home_layout import LocalnetConfig, LocalnetError
from .network import Localnet
from .observer import TrainingObserver

REQUESTER = "requester"
"""The key name the demo pays for the task from (`layout.key_names`)."""
DEMO_BUDGET = 50_000_000  # 50 TRL
RESULTS_DIRECTORY = "results"
"""Where in the localnet's home the demo writes each task's fetched model (`trolly-wallet task fetch`'s files),
in `task-<id>`."""


@dataclass(frozen=True)
class DemoOptions:
    task: DemoTask = DEMO_TASKS["digits"]
    rounds: int | None = None  # the task's default
    budget: int = DEMO_BUDGET
    timeout: float | None = None  # the task's default
    churn: int = 0
    """Members to kill mid-task (`churn.py`); with churn the localnet has one spare worker, which replaces them."""
    browser_workers: int = 0
    """Places of the task kept for browser tabs (the console's worker page) beside the localnet's workers: the
    task wants this many more workers and starts once the tabs joined (it needs a task allowing wasm32)."""

    @property
    def task_rounds(self) -> int:
        return self.rounds or self.task.rounds

    @property
    def task_timeout(self) -> float:
        return self.timeout or self.task.timeout


class Demo:
    def __init__(self, net: Localnet, config: LocalnetConfig, options: DemoOptions, console: Console) -> None:
        self.net = net
        self.config = config
        self.options = options
        self.console = console
        self.keyring = Keyring(net.layout.wallet_home, backend="test")
        self.observer: TrainingObserver | None = None  # set once the spec and dataset exist
        self.last_line = ""
        self.churn = Churn(options.churn, net.supervisor.kill,
                           {self.keyring.get(name).address: name for name in self.names()})

    async def run(self, started: float) -> dict:
        """Submit, follow and settle the task; balances are read at one height before and one after, so that
        each account's change is explained by its pay, penalties and the tx fees it paid in between."""
        task = self.options.task
        with tempfile.TemporaryDirectory(prefix="trolly-demo-") as scratch:
            data = task.data(Path(scratch))
            async with BlobServer(data.store, port=self.config.data_port()) as data_server, AsyncRpcClient(self.config.rpc_url(0)) as client:
                spec = task.spec(data.section(data_server.url), self.options.task_rounds)
                task_spec = parse_spec(spec)
                self.observer = TrainingObserver(task_spec, data.dataset(), BlobStore(Path(scratch) / "observed"))
                await self.wait_for_workers(client)
                before_height, balances_before = await self.balances(client)
                task_id = await self.submit(client, spec, data.key_hash)
                view = await self.follow(client, task_id, data.key)
                accuracy, loss = await self.evaluate_final(client, view)
                after_height, balances_after = await self.balances(client)
                tx_fees = await self.tx_fees(client, before_height, after_height)
        return self.settle(view, accuracy, loss, balances_before, balances_after, tx_fees, started)

    def validator_names(self) -> list[str]:
        return [self.config.node_name(i) for i in range(self.config.validators)]

    def names(self) -> list[str]:
        return [REQUESTER] + [f"worker-{i}" for i in range(self.config.workers)] + self.validator_names()

    async def balances(self, client: AsyncRpcClient) -> tuple[int, dict[str, int]]:
        """Every account's holdings, all read at one height (read again if a block came in between): its balance,
        plus, for a validator's operator, the fee rewards credited to its self-bond and not yet withdrawn (the
        operator's commission reaches its balance at once, the rest of its fee share its rewards)."""
        while True:
            heights, out = set(), {}
            for name in self.names():
                try:
                    height, account = await fetch_account_at(client, self.keyring.get(name).address)
                except WalletError as error:
                    raise LocalnetError(f"cannot read {name}'s balance: {error}") from None
                heights.add(height)
                out[name] = account.balance
            if len(heights) == 1:
                height = heights.pop()
                for name in self.validator_names():
                    rewards = await get_rewards(client, self.keyring.get(name).address, height=height)
                    out[name] += rewards.total
                return height, out

    async def tx_fees(self, client: AsyncRpcClient, after: int, until: int) -> dict[str, int]:
        """The fees each account's transactions paid in blocks after..until (their `tx` events)."""
        fees = {}
        for name in self.names():
            address = self.keyring.get(name).address
            query, page, total, paid = f"tx.signer='{address}' AND tx.height>{after} AND tx.height<={until}", 1, 0, 0
            while True:
                results, count = await client.tx_search(query, page=page, per_page=100)
                for result in results:
                    paid += sum(int(event.get("fee", "0")) for event in result.events
                                if event.type == "tx" and event.get("signer") == address)
                total += len(results)
                if not results or total >= count:
                    break
                page += 1
            fees[name] = paid
        return fees

    async def wait_for_workers(self, client: AsyncRpcClient) -> None:
        """Every worker registers (and stakes) when it starts; settle-up figures are taken after that."""
        deadline = time.monotonic() + 90.0
        waiting = [f"worker-{i}" for i in range(self.config.workers)]
        while waiting:
            if time.monotonic() > deadline:
                raise LocalnetError(f"{', '.join(waiting)} did not register within 90s (see `trolly-localnet logs`)")
            address = self.keyring.get(waiting[0]).address
            try:
                registered = (await get_worker(client, address)).registered
            except WalletError:
                registered = False
            if registered:
                waiting.pop(0)
            else:
                await asyncio.sleep(0.3)
        self.console.print(f"{self.config.workers} workers registered")

    async def submit(self, client: AsyncRpcClient, spec: bytes, data_key_hash: bytes = b"") -> int:
        """The task submitted from the `requester` key by the requester library (`submit_task`, the CLI's and the
        console's), with its settings but the demo task's round window where it names one."""
        workers = self.config.workers - (1 if self.options.churn else 0)  # the spare waits for a slot to open
        workers += self.options.browser_workers
        order = TaskOrder(spec, self.options.budget, workers, round_blocks=self.options.task.round_blocks,
                          data_key_hash=data_key_hash)
        submitted = await submit_task(client, order, sending_with(client, self.keyring.signer(REQUESTER)))
        plan, outcome = submitted.plan, submitted.outcome
        self.console.print(
            f"submitted task [bold]{submitted.task_id}[/bold]: {plan.rounds} rounds, {workers} workers, "
            f"reward {plan.reward_per_round}utrl/round, collateral {plan.collateral}utrl, "
            f"budget {plan.budget}utrl, rounds of {order.round_window} blocks "
            f"(tx {outcome.hash[:12]}, height {outcome.included.height})"
        )
        return submitted.task_id

    async def follow(self, client: AsyncRpcClient, task_id: int, data_key: bytes | None) -> TaskView:
        """The requester library's `follow_task` (a private task's key delivered as the CLI and the console
        deliver it), each look printed when it changes and handed to the observer and the churn."""
        requester = self.keyring.signer(REQUESTER) if data_key is not None else None
        events = follow_task(client, task_id, requester=requester, data_key=data_key)
        try:
            async with asyncio.timeout(self.options.task_timeout), contextlib.aclosing(events):
                async for event in events:
                    await self.show(event)
                    if isinstance(event, Looked) and event.ended:
                        return event.view
        except TimeoutError:
            pass
        raise LocalnetError(f"task {task_id} did not settle within {self.options.task_timeout:.0f}s "
                            f"(see `trolly-localnet logs` for the workers and the verifier)")

    async def show(self, event: FollowEvent) -> None:
        """One follow event printed; a look's progress only when it changed, and the look passed on."""
        if isinstance(event, Trouble):  # the node may be restarting (a crash, or a developer): keep following
            self.say(f"[yellow]{escape(event.message)}[/yellow]")
        elif isinstance(event, KeysDelivered):
            name_of = {self.keyring.get(name).address: name for name in self.names()}
            self.say(f"data key sealed to {', '.join(name_of.get(a, a) for a in event.recipients)}")
        elif isinstance(event, KeylessRecipient):
            self.say(f"[yellow]no public key on chain for {event.address}: it cannot be given the data key[/yellow]")
        elif isinstance(event, Looked):
            self.say(progress_line(event.view))
            for weights_line in await self.observer.advance(event.view):
                self.console.print(f"  [cyan]{weights_line}[/cyan]")
            for churn_line in await self.churn.advance(event.view):
                self.console.print(f"  [magenta]{churn_line}[/magenta]")

    def say(self, line: str) -> None:
        """Print `line` unless it repeats the last one said (a task looked at every few seconds changes less)."""
        if line != self.last_line:
            self.console.print(line)
            self.last_line = line

    async def evaluate_final(self, client: AsyncRpcClient, view: TaskView) -> tuple[float, float]:
        """What `trolly-wallet task fetch` and `task eval --data` do: the final weights fetched from any member by
        the hash the chain recorded and checked against the spec, written as safetensors into the localnet's
        home, and evaluated on the held-out split of the data the requester served."""
        if view.status != COMPLETED or not view.final_weights_hash:
            raise LocalnetError(f"task {view.id} ended {view.status} without final weights")
        result = await fetch_result(client, view.id, AddressPolicy(allow_private=True))  # workers on 127.0.0.1
        directory = self.net.layout.home / RESULTS_DIRECTORY / f"task-{view.id}"
        files = write_result(result, directory)
        evaluated = evaluate_result(result, self.observer.dataset)
        self.console.print(
            f"final weights {view.final_weights_hash[:16]} fetched by hash into {directory} ({', '.join(files)}): "
            f"held-out loss {evaluated['loss']:.4f}, accuracy [bold]{evaluated['accuracy']:.4f}[/bold]"
        )
        return evaluated["accuracy"], evaluated["loss"]

    def settle(self, view: TaskView, accuracy: float, loss: float, before: dict, after: dict, tx_fees: dict,
               started: float) -> dict:
        table = Table(title=f"Settlement of task {view.id} ({view.status})")
        for column in ("account", "paid by the task", "penalties", "tx fees paid", "balance change on chain"):
            table.add_column(column, justify="right" if column != "account" else "left")
        change = {name: after[name] - before[name] for name in after}
        paid: dict[str, int] = {}
        name_of = {self.keyring.get(name).address: name for name in self.names()}
        for member in view.members:
            name = name_of.get(member.worker, member.worker)
            paid[name] = member.paid
            penalties = member.penalized + member.slashed
            table.add_row(f"{name} ({member.status})", str(member.paid), str(penalties), str(tx_fees[name]),
                          f"{change[name]:+d}")
        spent = view.budget - view.refunded
        table.add_row("validator + verifier fees of the task", str(view.paid_fees), "", "", "")
        validators = self.validator_shares(change, tx_fees)
        for name, share in validators.items():
            table.add_row(f"{name} ({share['power_percent']}% power): fee share", str(share["fee_share"]), "",
                          str(tx_fees[name]), f"{change[name]:+d}")
        table.add_row(REQUESTER, f"-{spent} (refund {view.refunded})", "", str(tx_fees[REQUESTER]),
                      f"{change[REQUESTER]:+d}")
        self.console.print(table)
        checks = {
            "requester paid budget minus refund, plus its tx fees": change[REQUESTER] == -spent - tx_fees[REQUESTER],
            "spent = worker pay + fees": spent == view.paid_workers + view.paid_fees,
            "each worker's balance change = pay - penalties - tx fees": all(
                change[name_of[m.worker]] == m.paid - m.penalized - m.slashed - tx_fees[name_of[m.worker]]
                for m in view.members
            ),
        }
        if not self.observer.stopped:
            checks[f"W_1..W_{view.rounds} recomputed here = the chain's agreed and final weights hashes"] = (
                len(self.observer.hashes) == view.rounds + 1 and not self.observer.mismatches(view))
        for what, holds in checks.items():
            self.console.print(f"  {'[green]ok[/green]' if holds else '[red]MISMATCH[/red]'}  {what}")
        for wrong in self.observer.mismatches(view):
            self.console.print(f"     [red]{wrong}[/red]")
        if not all(checks.values()):
            raise LocalnetError("the settlement does not match the chain's balances")
        return {
            "task": self.options.task.name, "task_id": view.id, "rounds": view.rounds, "status": view.status,
            "final_accuracy": round(accuracy, 4), "final_loss": round(loss, 4),
            "accuracy_floor": self.options.task.accuracy_floor, "paid_per_worker": paid, "fees": view.paid_fees,
            "refund": view.refunded, "engine": self.config.engine, "validators": validators,
            "votes": round_votes(view, {self.keyring.get(n).address: n for n in self.validator_names()}),
            "seconds": round(time.monotonic() - started, 1), **self.churn.summary(view),
        }

    def validator_shares(self, change: dict[str, int], tx_fees: dict[str, int]) -> dict[str, dict]:
        """Per validator: its power share and what it received while the task ran (the change of its balance and
        pending rewards, plus the tx fees its verifier paid): the task's validator fee by power, the verifier fee
        for its votes, and its share of every tx fee of the period (commission and its self-bond's rewards)."""
        total = sum(self.config.validator_stake(i) for i in range(self.config.validators))
        return {
            name: {"power_percent": round(100 * self.config.validator_stake(i) / total, 1),
                   "fee_share": change[name] + tx_fees[name]}
            for i, name in enumerate(self.validator_names())
        }


def round_votes(view: TaskView, validator_names: dict[str, str]) -> list[dict]:
    """Per round, which validator voted what: [{"round": r, "votes": {"validator-0": {"pass": 3}, ...}}]."""
    rounds = []
    for details in view.round_details:
        if details.final_report:
            continue
        votes: dict[str, dict[str, int]] = {}
        for commitment in details.commitments:
            for vote in commitment.verdicts:
                name = validator_names.get(vote.validator, vote.validator)
                tally = votes.setdefault(name, {})
                tally[vote.verdict] = tally.get(vote.verdict, 0) + 1
        rounds.append({"round": details.round, "votes": dict(sorted(votes.items()))})
    return rounds


def progress_line(view: TaskView) -> str:
    """One line of live progress: round, phase, commitments, verdicts, pay so far."""
    parts = [f"task {view.id} {view.status}", view.progress]
    if view.status == OPEN:
        parts.append(f"{view.workers_joined}/{view.workers_wanted} workers joined")
    if view.round_details:
        current = view.round_details[-1]
        commitments = current.commitments
        verdicts = sum(len(c.verdicts) for c in commitments)
        outcomes = ",".join(sorted(c.outcome for c in commitments)) or "-"
        label = "final weights" if current.final_report else f"round {current.round}"
        parts.append(f"{label}: {len(commitments)} commits, {verdicts} verdicts, outcomes {outcomes}")
    parts.append(f"phase {view.phase}")
    parts.append(f"paid {view.paid_workers}utrl to workers, {view.paid_fees}utrl fees")
    slashed = [m for m in view.members if m.status in (SLASHED, DROPPED)]
    if slashed:
        parts.append("dropped/slashed: " + ", ".join(f"{m.worker[:12]}.. {m.status}" for m in slashed))
    return " | ".join(p for p in parts if p)


def run_demo(home, config: LocalnetConfig, options: DemoOptions, console: Console, keep: bool = False) -> dict:
    started = time.monotonic()
    net = Localnet(home, config)
    if net.running_services():
        raise LocalnetError(f"a localnet is already running in {net.layout.home}; `trolly-localnet down` it first")
    if net.layout.exists():
        console.print(f"removing the previous localnet state in {net.layout.home} (the demo starts clean)")
        net.reset()
    try:
        net = Localnet(home, config)
        actual = net.up()
        engine = "CometBFT" if actual.engine == "cometbft" else "the solo engine"
        console.print(f"localnet up in {time.monotonic() - started:.1f}s: {actual.rpc_url(0)}, "
                      f"{actual.workers} workers ({actual.slow_workers} declared slower), "
                      f"{actual.validators} validator(s) with their verifiers on {engine}")
        console.print(f"web console: {net.layout.console_address(actual)}", soft_wrap=True)
        if options.browser_workers:
            console.print(f"browser worker: {net.layout.worker_page_address(actual)}  (open it in "
                          f"{options.browser_workers} tab(s): the task waits for them)", soft_wrap=True)
        return asyncio.run(Demo(net, actual, options, console).run(started))
    finally:
        if not keep:
            net.down()
