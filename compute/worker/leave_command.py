"""`trolly-worker leave TASK_ID`: this worker leaves a task (`MsgLeaveTask`, docs/protocol.md 4.1c).

The command reads the task first and says what leaving costs before it signs anything: a task not yet started
gives the collateral back in full; a running task whose current round this worker has not committed takes the
missed-round penalty at once; one whose commitment awaits verification lets the worker go when that round
settles (paid if it passes, slashed if it fails). A worker holding a private task's data key forfeits its whole
collateral either way (docs/privacy.md). A worker service running on the same home finds itself no
longer an active member and stops working on the task (`plan.decide`).
"""

from __future__ import annotations

import json

import click

from trolly.chain.crypto import PrivateKey
from trolly.chain.market.records import ACTIVE, LIVE_STATUSES, OPEN
from trolly.chain.proto import market_pb2
from trolly.wallet.keyring import Keyring
from trolly.wallet.market_queries import get_task
from trolly.wallet.market_views import TaskView
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.rpc import RpcClient, normalize_node_url

from .config import load_config, resolve_home, wallet_home
from .errors import LeaveRefused
from .market import MarketClient
from .plan import committed_on_chain
from .report_commands import home_option, worker_address


def leave_effect(view: TaskView, address: str) -> str:
    """What `MsgLeaveTask` from `address` would do to it now; LeaveRefused when the chain would refuse it."""
    member = view.member(address)
    if view.status not in LIVE_STATUSES:
        raise LeaveRefused(f"task {view.id} already ended ({view.status}): there is nothing to leave")
    if member is None or member.status != ACTIVE:
        standing = "not a member" if member is None else f"{member.status} ({member.reason})"
        raise LeaveRefused(f"worker {address} is not an active member of task {view.id}: {standing}")
    if member.leaving:
        raise LeaveRefused(f"already leaving task {view.id}: it leaves when round {view.round} settles")
    if view.status == OPEN:
        return f"leaves task {view.id} now (not started): its collateral of {member.collateral} utrl comes back in full"
    if member.first_round <= view.round and committed_on_chain(view, view.round, address):
        if member.holds_key:
            return (f"leaves task {view.id} when round {view.round} settles: paid for it if it passes verification, "
                    f"but it holds the private data's key, so its collateral of {member.collateral} utrl is "
                    f"forfeited (burned)")
        return (f"leaves task {view.id} when round {view.round} settles: paid for it and its collateral of "
                f"{member.collateral} utrl back in full if it passes verification, slashed if it fails")
    penalty = view.departure_penalty(member)
    if member.holds_key:
        return (f"leaves task {view.id} now, holding the private data's key: its whole collateral of "
                f"{penalty} utrl is forfeited (burned)")
    return (f"leaves task {view.id} now, without committing round {view.round}: the missed-round penalty of "
            f"{penalty} utrl is burned and {member.collateral - penalty} utrl of its collateral returned")


async def send_leave(client: RpcClient, key: PrivateKey, home, fee: int, task_id: int):
    market = MarketClient(client.async_client, key, home, fee)
    return await market.send(market_pb2.MsgLeaveTask(task_id=task_id))


@click.command()
@home_option
@click.argument("task_id", type=click.IntRange(1))
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation before signing.")
@click.option("--node", default=None, help="Override the node address from worker.json.")
@click.option("--password-file", type=click.Path(dir_okay=False), default=None,
              help="Keyring password file (file backend; else $TROLLY_WALLET_PASSWORD).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def leave(home, task_id, yes, node, password_file, output) -> None:
    """Leave task TASK_ID, so that its slot opens for a replacement: says what it costs first (the collateral
    back in full before the start; the missed-round penalty when this round is not committed; a committed
    round still verified, paid or slashed, before the worker goes)."""
    root = resolve_home(home)
    config = load_config(root)
    address = worker_address(root, config)
    with RpcClient(normalize_node_url(node) if node else config.node) as client:
        effect = leave_effect(client.run(get_task(client.async_client, task_id)), address)
        if not yes and not click.confirm(f"This worker {effect}. Sign and send MsgLeaveTask?", err=True):
            raise LeaveRefused("cancelled: nothing was sent")
        key = Keyring(wallet_home(root, config), config.keyring_backend, PasswordSource(password_file)).signer(
            config.key_name)
        outcome = client.run(send_leave(client, key, root, config.fee, task_id))
    if output == "json":
        click.echo(json.dumps({"task_id": task_id, "worker": address, "effect": effect} | outcome.to_json(), indent=2))
        return
    click.echo(f"This worker {effect} (tx {outcome.hash}, block {outcome.included.height}).")
