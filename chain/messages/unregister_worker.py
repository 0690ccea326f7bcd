"""market `MsgUnregisterWorker`: stop being a worker; the stake returns after `worker_unbonding_blocks`.

Only a worker with no open or running task may leave, so its collateral is never stranded; the unbonding
delay keeps the stake at hand while anything it touched could still be disputed.
"""

from __future__ import annotations

from ..block import BlockContext
from ..market.errors import WorkerBusy
from ..market.events import worker_event
from ..market.params import MarketParams
from ..market.store import add_unbonding_stake, delete_worker, get_worker
from ..params import get_params
from ..proto.market_pb2 import MsgUnregisterWorker
from ..state import State


def validate_unregister_worker(msg: MsgUnregisterWorker) -> None:
    """Nothing to check: the message has no fields."""


def process_unregister_worker(state: State, ctx: BlockContext, signer: bytes, msg: MsgUnregisterWorker) -> None:
    worker = get_worker(state, signer)
    if worker.tasks:
        raise WorkerBusy(f"the worker still belongs to tasks {', '.join(map(str, worker.tasks))}")
    maturity = ctx.env.height + get_params(state, MarketParams).worker_unbonding_blocks
    delete_worker(state, signer)
    add_unbonding_stake(state, maturity, signer, worker.stake)
    worker_event(ctx, signer, "unregistered", stake=worker.stake, unbonded_at=maturity)
