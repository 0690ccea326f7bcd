"""`trolly-wallet worker ...`: register as a compute worker, join tasks, check status, leave.

A worker stakes to register (a sybil bond, returned `worker_unbonding_blocks` after `unregister`), declares
its hardware (device and a benchmarked throughput) and the URL of its blob service. The `trolly-worker`
service does the same through the library; these commands are for people and scripts.
"""

from __future__ import annotations

import click

from trolly.chain.proto import market_pb2

from ..amounts import parse_amount
from ..market_views import WorkerView
from ..proven_views import prove_worker
from ..command_line.errors import WalletGroup
from ..command_line.options import keyring_options, node_options, output_option, settings
from ..command_line.output import amount_text, emit, print_key_values, proof_text
from .query import address_of
from .task import task_id_argument
from .transactions import TransactionFlags, run_transaction, transaction_options


@click.group(cls=WalletGroup)
def worker() -> None:
    """Register as a worker, join tasks, show a worker, unregister."""


@worker.command("register")
@click.option("--stake", "stake_amount", required=True, help="Stake to lock, e.g. 10trl (at least the chain's minimum).")
@click.option("--blob-url", default="", help="Base URL of your blob service, e.g. http://203.0.113.5:8700.")
@click.option("--relay", default="", help="Or, with no inbound route: the blob relay you push your blobs to.")
@click.option("--device", default="cpu", show_default=True, help="What you train on, e.g. cpu or cuda:RTX 4090.")
@click.option("--samples-per-second", type=click.IntRange(min=1), required=True,
              help="Your benchmarked training throughput.")
@click.option("--memory-mb", type=click.IntRange(min=0), default=0, help="Memory available for training.")
@click.option("--threads", type=click.IntRange(min=0), default=0, help="Threads used for training.")
@transaction_options
def register(stake_amount: str, blob_url: str, relay: str, device: str, samples_per_second: int, memory_mb: int,
             threads: int, **flags) -> None:
    """Register the --from account as a worker, served at --blob-url or through a --relay."""
    if not blob_url and not relay:
        raise click.UsageError("give --blob-url (your blob service) or --relay (a blob relay you push to)")
    message = market_pb2.MsgRegisterWorker(
        stake=parse_amount(stake_amount, what="stake"), blob_url=blob_url, relay=relay,
        hardware=market_pb2.HardwareProfile(device=device, samples_per_second=samples_per_second,
                                            memory_mb=memory_mb, threads=threads))
    run_transaction(TransactionFlags(**flags), [message])


@worker.command("join")
@click.argument("task_id")
@transaction_options
def join(task_id: str, **flags) -> None:
    """Join the open task TASK_ID, locking its collateral."""
    run_transaction(TransactionFlags(**flags), [market_pb2.MsgJoinTask(task_id=task_id_argument(task_id))])


@worker.command("unregister")
@transaction_options
def unregister(**flags) -> None:
    """Stop being a worker (no open or running task left); the stake returns after the unbonding period."""
    run_transaction(TransactionFlags(**flags), [market_pb2.MsgUnregisterWorker()])


@worker.command("status")
@click.argument("address_or_name")
@keyring_options
@node_options
@output_option
def status(address_or_name: str) -> None:
    """Stake, hardware, blob URL, tasks and earnings of the worker ADDRESS_OR_NAME (address or key name)."""
    options = settings()
    client = options.client()
    view, proven = client.run(prove_worker(client.async_client, address_of(address_or_name)))
    emit({**view.to_answer(), "proof": proven.proof_json()}, options.json,
         lambda data: render_worker(view, data["proof"]))


def render_worker(view: WorkerView, proof: dict) -> None:
    rows = [("address", view.address), ("registered", "yes" if view.registered else "no")]
    record = view.record
    if record is not None:
        rows += [("stake", amount_text(record.stake)), ("blob url", record.blob_url or "-"),
                 ("relay", record.relay or "-"),
                 ("hardware", f"{record.hardware.device}, {record.hardware.samples_per_second} samples/s"),
                 ("tasks", ", ".join(map(str, record.tasks)) or "-"), ("earned", amount_text(record.earned)),
                 ("slashed", amount_text(record.slashed)), ("penalties", amount_text(record.penalized))]
    for entry in view.unbonding:
        rows.append(("unbonding", f"{amount_text(entry.amount)} at height {entry.maturity_height}"))
    rows.append(("proof", proof_text(proof)))
    print_key_values(rows)
