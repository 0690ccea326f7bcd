"""`trolly-wallet task ...`: pay for a training task, follow it, cancel it.

`submit` reads the spec JSON, checks it with the chain's own rules, works out what the task costs (rounds x
(reward + validator and verifier fees)) and the collateral each worker must lock (the honesty minimum of
`trolly.chain.market.params`), shows both, and only then asks to sign: the requester library's `submit_task`
(`wallet/requester.py`, with its settings), and for `--data` its `follow_task` (`following.py`). `list` and
`status` read the market queries; `cancel` ends a task (before it starts everything is refunded; later, settled
rounds stay paid). `submit --data`, `fetch` and `eval` need the compute library: they are registered by name
(`TASK_COMMANDS`, `DATA_SUBMISSION`, see `lazy_commands.py`) and imported only when used.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import click

from trolly.chain.errors import ChainError
from trolly.chain.market.datasets import TASKS
from trolly.chain.market.records import OPEN, RUNNING
from trolly.chain.market.spec import validate_spec
from trolly.chain.proto import market_pb2

from ..amounts import parse_amount
from ..errors import WalletError
from ..market_views import TaskSummary, TaskView
from ..proven_views import prove_task, prove_task_listing
from ..requester import (DEFAULT_ROUND_BLOCKS, JOIN_BLOCKS, ROUND_BLOCKS_BY_ARCH, SAMPLES_PER_WORKER, SubmittedTask,
                         TaskOrder, plan_order, submit_message, submit_task)
from ..task_fit import explain_no_join
from ..tasks import TaskPlan
from ..command_line.errors import WalletGroup
from ..command_line.options import node_options, output_option, settings
from ..command_line.output import (amount_text, console, emit, key_value_table, print_key_values, print_proof,
                                   print_table, proof_text)
from .lazy_commands import load_target
from .following import follow_in_terminal
from .transactions import TransactionFlags, run_transaction, transact, transaction_options


TASK_COMMANDS: dict[str, str] = {
    "fetch": "trolly.compute.requester.cli:fetch",
    "eval": "trolly.compute.requester.cli:evaluate_command",
}
"""The `task` commands that need the compute library, imported on first use."""
DATA_SUBMISSION = "trolly.compute.requester.cli:prepare_data_submission"
"""What `task submit --data` calls to pack, serve and build the spec (returns a `DataSubmission`)."""


class TaskGroup(WalletGroup):
    """The `task` group: its own commands, and TASK_COMMANDS imported when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(TASK_COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        return load_target(TASK_COMMANDS[name]) if name in TASK_COMMANDS else None


@click.group(cls=TaskGroup)
def task() -> None:
    """Submit, list, follow and cancel training tasks."""


def read_spec(path: str) -> bytes:
    try:
        raw = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise WalletError(f"cannot read the spec {path}: {exc.strerror or exc}") from None
    try:
        rounds = json.loads(raw)["training"]["rounds"]
        validate_spec(raw, rounds)
    except ChainError as exc:
        raise WalletError(f"the spec {path} is not valid: {exc}") from None
    except (ValueError, KeyError, TypeError):
        raise WalletError(f"the spec {path} is not valid: it needs a JSON object with training.rounds") from None
    return raw


@task.command("submit")
@click.argument("spec_file", type=click.Path(dir_okay=False), required=False)
@click.option("--data", "data_path", default=None,
              help="Your data: a packed directory, or a CSV, JSONL or image folder packed here first. The spec "
                   "(SPEC_FILE's, else a default one) gets the data's input and output sizes.")
@click.option("--data-url", "data_urls", multiple=True,
              help="Where the data is already served (`trolly-wallet data serve`); else this command serves it.")
@click.option("--listen", default="127.0.0.1:8600", show_default=True,
              help="With --data and no --data-url: host:port to serve the data on while the task runs.")
@click.option("--model", type=click.Choice(["mlp", "cnn", "lora-text"]), default=None,
              help="With --data and no SPEC_FILE: the architecture to train [default: lora-text for texts packed "
                   "for it (`data pack --model lora-text`), else mlp].")
@click.option("--rounds", type=click.IntRange(min=1), default=None, help="With --data: the task's rounds.")
@click.option("--epochs", type=float, default=None,
              help="With --data: each worker's passes over the train split, which set the rounds and inner steps "
                   "[default: sized to the data, shown in the plan with the cost per epoch].")
@click.option("--label-column", default=None, help="With --data on a CSV: the label column (default: the last).")
@click.option("--task", "data_task", type=click.Choice(TASKS), default=None,
              help="With --data on a CSV: classify the label column's values, or predict it as a number "
                   "(regression) [default: classification; a packed directory keeps what it was packed for].")
@click.option("--private/--public", default=True, show_default=True,
              help="With --data on a file or folder packed here: encrypt it under a data key that only the task's "
                   "members and validators receive (--private), or pack it in clear (--public). A packed directory "
                   "stays as `data pack` made it.")
@click.option("--budget", required=True, help="What you escrow for the task, e.g. 50trl; the unspent part is refunded.")
@click.option("--reward-per-round", default=None,
              help="Paid to each round's verified workers, split by samples processed (default: all the budget allows).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Workers wanted.")
@click.option("--collateral", default=None, help="Each worker's collateral (default: the chain's minimum for this task).")
@click.option("--samples-per-worker", type=click.IntRange(min=1), default=SAMPLES_PER_WORKER, show_default=True,
              help="Segments the validators replay per worker per round.")
@click.option("--join-blocks", type=click.IntRange(min=1), default=JOIN_BLOCKS, show_default=True,
              help="Blocks to wait for the workers before the task expires (full refund).")
@click.option("--round-blocks", type=click.IntRange(min=1), default=None,
              help=f"Blocks each round's workers have to commit [default: {DEFAULT_ROUND_BLOCKS}; for a model whose "
                   f"rounds take longer, by its architecture: "
                   f"{', '.join(f'{arch} {blocks}' for arch, blocks in ROUND_BLOCKS_BY_ARCH.items())}].")
@transaction_options
def submit(spec_file: str | None, data_path: str | None, data_urls: tuple[str, ...], listen: str, model: str | None,
           rounds: int | None, epochs: float | None, label_column: str | None, data_task: str | None, private: bool,
           budget: str, reward_per_round: str | None, workers: int, collateral: str | None, samples_per_worker: int,
           join_blocks: int, round_blocks: int | None, **flags) -> None:
    """Pay for the training task described by SPEC_FILE (JSON, docs/protocol.md section 1), or for training
    on your own data (--data): packed if needed, served while the task runs, checked before anything is paid."""
    def order(spec: bytes, data_key_hash: bytes = b"") -> TaskOrder:
        return TaskOrder(
            spec, parse_amount(budget, what="budget"), workers,
            None if reward_per_round is None else parse_amount(reward_per_round, what="reward per round"),
            None if collateral is None else parse_amount(collateral, what="collateral"),
            samples_per_worker, join_blocks, round_blocks, data_key_hash)

    if data_path is None:
        if spec_file is None:
            raise WalletError("name a SPEC_FILE, or your data with --data")
        if data_task is not None:
            raise WalletError("--task is what --data is packed for; a SPEC_FILE's dataset section declares its own")
        submit_order(order(read_spec(spec_file)), spec_file, TransactionFlags(**flags))
        return
    prepared = load_target(DATA_SUBMISSION)(data_path, spec_file, model, rounds, data_urls, listen, label_column,
                                            private, data_task, epochs=epochs)
    try:
        submitted = submit_order(order(prepared.spec, prepared.data_key_hash), f"built for {data_path}",
                                 TransactionFlags(**flags), prepared.plan_rows)
        if submitted is not None:
            follow_in_terminal(submitted, prepared.server, prepared.data_key)
    finally:
        prepared.close()


def submit_order(order: TaskOrder, spec_label: str, transaction: TransactionFlags,
                 data_rows=lambda plan: []) -> SubmittedTask | None:
    """Plan and show the task (with `data_rows(plan)`: what `--data` adds), then sign and send it
    (`requester.submit_task`, through the command's confirmation and key); the task once it is included, None when
    the transaction was only checked, printed or broadcast."""
    options = settings()
    client = options.client()
    plan = client.run(plan_order(client.async_client, order))
    if not options.json:
        rows = plan_rows(order, plan, spec_label) + data_rows(plan)
        console(err=True).print(key_value_table(rows, title="Task"))
    if transaction.dry_run or transaction.generate_only or transaction.no_wait:
        run_transaction(transaction, [submit_message(order, plan)])
        return None

    async def send(messages):
        done = await transact(transaction, messages)
        return done.outcome, done.key

    submitted = client.run(submit_task(client.async_client, order, send, plan))
    if not options.json:
        click.echo(f"Task {submitted.task_id} submitted; follow it with "
                   f"`trolly-wallet task status {submitted.task_id}`.")
    return submitted


def plan_rows(order: TaskOrder, plan: TaskPlan, spec_label: str) -> list[tuple[str, object]]:
    spec = order.spec
    return [("spec", f"{spec_label} ({len(spec)} bytes, sha256 {hashlib.sha256(spec).hexdigest()})"),
            ("rounds", plan.rounds), ("workers", order.workers),
            ("reward per round", amount_text(plan.reward_per_round)),
            ("cost (rounds x reward + fees)", amount_text(plan.cost)), ("budget", amount_text(plan.budget)),
            *([("key reserve (refunded unless a member goes unkeyed)", amount_text(plan.key_reserve))]
              if plan.private_data else []),
            ("collateral per worker", f"{amount_text(plan.collateral)} "
                                      f"(minimum {amount_text(plan.minimum_collateral)})"),
            ("samples per worker", f"{order.samples_per_worker} of {plan.segments_per_round} segments per round"),
            ("round window", f"{order.round_window} blocks")]


def progress(task: TaskSummary) -> str:
    if task.status == OPEN:
        return f"waiting for workers ({task.workers_joined}/{task.workers_wanted})"
    if task.status == RUNNING:
        if task.round >= task.rounds:
            return f"final report (all {task.rounds} rounds done)"
        return f"round {task.round + 1} of {task.rounds} ({task.phase})"
    return task.status


@task.command("list")
@click.option("--all", "show_all", is_flag=True, help="Every task, not only open and running ones.")
@node_options
@output_option
def list_tasks(show_all: bool) -> None:
    """Open and running tasks (with --all, every task). Each page of the listing is proven complete against the
    next block's app hash (exit 11 if a proof does not hold)."""
    options = settings()
    client = options.client()
    found, proofs = client.run(prove_task_listing(client.async_client, open_only=not show_all))
    proof = {**proofs[-1].proof_json(), "pages": len(proofs)}

    def render(_: list) -> None:
        print_table(["id", "status", "progress", "workers", "reward/round", "escrow", "requester"],
                    [[t.id, t.status, progress(t), f"{t.active_members}/{t.workers_wanted}",
                      amount_text(t.reward_per_round), amount_text(t.escrow_remaining), t.requester] for t in found],
                    empty="No tasks.")
        print_proof(proof)

    emit([{**t.to_answer(), "proof": proof} for t in found], options.json, render)


def task_id_argument(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise WalletError(f"a task id is a positive integer, got {text!r}")
    return int(text)


@task.command("status")
@click.argument("task_id")
@node_options
@output_option
def status(task_id: str) -> None:
    """Round r of R, workers, commitments, verdicts, what was paid and what escrow remains for TASK_ID."""
    options = settings()
    client = options.client()
    proven = client.run(prove_task(client.async_client, task_id_argument(task_id)))
    emit(proven.to_answer(), options.json,
         lambda data: render_task(proven.view, data["proof"], proven.rounds_note()))


def render_task(view: TaskView, proof: dict, rounds_note: str) -> None:
    print_key_values([
        ("task", view.id), ("status", view.status), ("progress", progress(view)),
        ("requester", view.requester), ("spec hash", view.spec_hash),
        ("reward per round", amount_text(view.reward_per_round)), ("budget", amount_text(view.budget)),
        ("paid to workers", amount_text(view.paid_workers)), ("fees paid", amount_text(view.paid_fees)),
        ("escrow remaining", amount_text(view.escrow_remaining)), ("refunded", amount_text(view.refunded)),
        ("collateral per worker", amount_text(view.collateral)),
        ("final weights hash", view.final_weights_hash or "-"), ("proof", proof_text(proof)),
        ("rounds' proof", rounds_note),
    ])
    print_table(["#", "worker", "status", "collateral", "paid", "rounds passed"],
                [[m.index, m.worker, m.status + (f" ({m.reason})" if m.reason else ""), amount_text(m.collateral),
                  amount_text(m.paid), m.rounds_passed] for m in view.members],
                title="Workers", empty="No workers yet.")
    rows = []
    for details in view.round_details:
        for c in details.commitments:
            votes = ", ".join(f"{v.segment}:{v.verdict}" for v in c.verdicts) or ("deleted" if c.verdicts_deleted else "-")
            rows.append([details.round, c.worker, c.outcome, ",".join(map(str, c.segments)) or "-", votes,
                         amount_text(c.paid)])
    if rows:
        print_table(["round", "worker", "outcome", "sampled", "verdicts", "paid"], rows, title="Rounds")


@task.command("why")
@click.argument("task_id")
@node_options
@output_option
def why(task_id: str) -> None:
    """Why no worker joined TASK_ID: each requirement of its spec against what each registered worker measured."""
    options = settings()
    client = options.client()
    report = client.run(explain_no_join(client.async_client, task_id_argument(task_id)))
    emit(report.to_json(), options.json, lambda _: click.echo("\n".join(report.lines())))


@task.command("cancel")
@click.argument("task_id")
@transaction_options
def cancel(task_id: str, **flags) -> None:
    """Cancel TASK_ID (requester only): refunds all before it starts; later, settled rounds stay paid."""
    run_transaction(TransactionFlags(**flags), [market_pb2.MsgCancelTask(task_id=task_id_argument(task_id))])
