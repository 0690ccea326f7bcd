"""The worker's side of the market module: the queries it follows and the transactions it sends.

Everything goes through CometBFT JSON-RPC (`trolly.wallet.rpc`), so the worker runs unchanged against
`trolly-node dev` and a real CometBFT network. Transactions are built and signed by the wallet library
(`TxSender`, with the home's nonce cache). A commitment is signed first (`sign`) and broadcast separately
(`broadcast`), so that the caller can save the exact bytes in between (`progress.py` explains why).
"""

from __future__ import annotations

import pathlib

from google.protobuf.message import Message

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.errors import NotFound
from trolly.chain.market.params import MarketParams
from trolly.chain.proto import market_pb2
from trolly.chain.tx import tx_hash
from trolly.wallet.errors import QueryFailed
from trolly.wallet.market_queries import (get_market_params, get_replay_gpus, get_spec, get_task, get_worker,
                                          list_tasks)
from trolly.wallet.market_views import TaskSummary, TaskView, WorkerRecord
from trolly.wallet.nonces import NonceCache
from trolly.wallet.rpc import AsyncRpcClient, TxResult
from trolly.wallet.sender import SendOutcome, TxSender, fetch_account


class MarketClient:
    def __init__(self, rpc: AsyncRpcClient, key: PrivateKey, home: pathlib.Path, fee: int = 0) -> None:
        self.rpc = rpc
        self.key = key
        self.address = encode_address(key.address)
        self.fee = fee
        self.sender = TxSender(rpc, NonceCache(home))

    async def close(self) -> None:
        await self.rpc.close()

    # ---- queries ------------------------------------------------------------------------------------------

    async def height(self) -> int:
        return (await self.rpc.status()).latest_block_height

    async def params(self) -> MarketParams:
        return await get_market_params(self.rpc)

    async def replayed_gpus(self) -> set[str]:
        """The GPU profile parts some validator's verifier replays (`/market/replay_gpus`)."""
        return (await get_replay_gpus(self.rpc)).replayed()

    async def balance(self) -> int:
        return (await fetch_account(self.rpc, self.address)).balance

    async def nonce(self) -> int:
        """The next nonce the chain expects from this worker (committed state)."""
        return (await fetch_account(self.rpc, self.address)).nonce

    async def worker(self) -> WorkerRecord | None:
        """This worker's record, or None when it is not registered."""
        try:
            view = await get_worker(self.rpc, self.address)
        except QueryFailed as error:
            if error.code == NotFound.code:
                return None
            raise
        return view.record

    async def task(self, task_id: int) -> TaskView:
        return await get_task(self.rpc, task_id)

    async def spec(self, task_id: int) -> bytes:
        return (await get_spec(self.rpc, task_id)).spec_bytes

    async def live_tasks(self) -> list[TaskSummary]:
        return await list_tasks(self.rpc, open_only=True)

    # ---- transactions -------------------------------------------------------------------------------------

    async def send(self, *messages: Message, timeout: float = 60.0) -> SendOutcome:
        plan = await self.sender.plan(self.address, list(messages), self.fee or None)
        return await self.sender.send(self.key, plan, wait=True, timeout=timeout)

    async def register(self, stake: int, hardware: market_pb2.HardwareProfile, blob_url: str,
                       relay: str = "") -> SendOutcome:
        return await self.send(market_pb2.MsgRegisterWorker(stake=stake, hardware=hardware, blob_url=blob_url,
                                                            relay=relay))

    async def update(self, hardware: market_pb2.HardwareProfile, blob_url: str, relay: str = "") -> SendOutcome:
        """Replace the hardware and the blob URL or relay (no relay: clear any, and serve from `blob_url`)."""
        return await self.send(market_pb2.MsgUpdateWorker(hardware=hardware, blob_url=blob_url, relay=relay,
                                                          clear_relay=not relay))

    async def join(self, task_id: int) -> SendOutcome:
        return await self.send(market_pb2.MsgJoinTask(task_id=task_id))

    async def sign(self, message: Message) -> bytes:
        """Signed transaction bytes carrying `message`, with the next nonce (not broadcast)."""
        plan = await self.sender.plan(self.address, [message], self.fee or None)
        return plan.sign(self.key)

    async def broadcast(self, raw: bytes, timeout: float = 60.0) -> SendOutcome:
        return await self.sender.broadcast_signed(raw, wait=True, timeout=timeout)

    async def find_tx(self, raw: bytes) -> TxResult | None:
        """The signed transaction `raw` as included in a block, or None while it is not."""
        return await self.rpc.find_tx(tx_hash(raw).hex().upper())
