"""market `MsgUpdateWorker`: add stake, or replace the hardware profile, the blob URL or the relay."""

from __future__ import annotations

from ..accounts import check_amount
from ..block import BlockContext
from ..errors import InvalidRequest
from ..market.events import worker_event
from ..market.params import MarketParams
from ..market.store import escrow_in, get_worker, put_worker
from ..market.urls import check_blob_url, check_relay_url
from ..params import get_params
from ..proto.market_pb2 import MsgUpdateWorker
from ..state import State
from .register_worker import relay_attribute, hardware_record


def validate_update_worker(msg: MsgUpdateWorker) -> None:
    if msg.add_stake == 0 and not msg.HasField("hardware") and not msg.blob_url and not msg.relay \
            and not msg.clear_relay:
        raise InvalidRequest("UpdateWorker changes nothing: set add_stake, hardware, blob_url, relay or clear_relay")
    if msg.add_stake:
        check_amount(msg.add_stake, "add_stake")
    if msg.blob_url:
        check_blob_url(msg.blob_url)
    if msg.relay:
        check_relay_url(msg.relay)
        if msg.clear_relay:
            raise InvalidRequest("UpdateWorker sets relay and clear_relay: choose one")


def process_update_worker(state: State, ctx: BlockContext, signer: bytes, msg: MsgUpdateWorker) -> None:
    params = get_params(state, MarketParams)
    worker = get_worker(state, signer)
    if msg.HasField("hardware"):
        worker.hardware = hardware_record(msg.hardware, params)
    if msg.blob_url:
        check_blob_url(msg.blob_url, params.max_blob_url_bytes)
        worker.blob_url = msg.blob_url
    if msg.relay:
        check_relay_url(msg.relay, params.max_blob_url_bytes)
        worker.relay = msg.relay
    if msg.clear_relay:
        if not worker.blob_url:
            raise InvalidRequest("clear_relay: this worker has no blob_url of its own to serve from; set one")
        worker.relay = ""
    if msg.add_stake:
        escrow_in(state, signer, msg.add_stake)
        worker.stake += msg.add_stake
    put_worker(state, worker)
    worker_event(ctx, signer, "updated", stake=worker.stake, blob_url=worker.blob_url, **relay_attribute(worker))
