"""market `MsgRegisterWorker`: become a worker by staking, with a hardware profile and a blob URL or a relay
(a worker with no inbound route pushes its blobs to a relay, which serves them: docs/protocol.md 3a)."""

from __future__ import annotations

from ..accounts import check_amount
from ..block import BlockContext
from ..market.errors import InvalidWorkerProfile, StakeTooLow, WorkerAlreadyRegistered
from ..market.events import worker_event
from ..market.params import MarketParams
from ..market.records import Worker
from ..market.store import escrow_in, find_worker, put_worker
from ..market.urls import check_blob_url, check_relay_url
from ..params import get_params
from ..proto.market_pb2 import HardwareProfile, MsgRegisterWorker
from ..state import State


def hardware_record(hardware: HardwareProfile, params: MarketParams) -> dict:
    if not hardware.device or len(hardware.device.encode()) > params.max_device_bytes:
        raise InvalidWorkerProfile(f"hardware.device must be 1..{params.max_device_bytes} bytes")
    if hardware.samples_per_second == 0:
        raise InvalidWorkerProfile("hardware.samples_per_second must be the benchmarked throughput (> 0)")
    return {"device": hardware.device, "samples_per_second": hardware.samples_per_second,
            "memory_mb": hardware.memory_mb, "threads": hardware.threads}


def validate_register_worker(msg: MsgRegisterWorker) -> None:
    check_amount(msg.stake, "stake")
    if msg.blob_url or not msg.relay:  # a relayed worker may have no URL of its own
        check_blob_url(msg.blob_url)
    if msg.relay:
        check_relay_url(msg.relay)
    if not msg.HasField("hardware"):
        raise InvalidWorkerProfile("a hardware profile is required")


def process_register_worker(state: State, ctx: BlockContext, signer: bytes, msg: MsgRegisterWorker) -> None:
    params = get_params(state, MarketParams)
    if find_worker(state, signer) is not None:
        raise WorkerAlreadyRegistered("this account is already a registered worker; use UpdateWorker")
    if msg.stake < params.min_worker_stake:
        raise StakeTooLow(f"stake {msg.stake}utrl is below the minimum {params.min_worker_stake}utrl")
    if msg.blob_url:
        check_blob_url(msg.blob_url, params.max_blob_url_bytes)
    if msg.relay:
        check_relay_url(msg.relay, params.max_blob_url_bytes)
    worker = Worker(address=signer, stake=msg.stake, blob_url=msg.blob_url,
                    hardware=hardware_record(msg.hardware, params), registered_height=ctx.env.height, relay=msg.relay)
    escrow_in(state, signer, msg.stake)
    put_worker(state, worker)
    worker_event(ctx, signer, "registered", stake=msg.stake, blob_url=msg.blob_url, **relay_attribute(worker))


def relay_attribute(worker: Worker) -> dict:
    """The event's `relay` attribute, only for a relayed worker (events of others stay as they were)."""
    return {"relay": worker.relay} if worker.relay else {}
