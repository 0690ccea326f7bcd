"""The Provide compute page's API: a key (created here or picked), its balance, a preflight of this machine,
and a local worker started and stopped as a supervised process, with its status and earnings.

    GET  /api/compute              keys with balances, the worker's state, its registration (balances and
                                   registration proven: `proof`), the last preflight and its earnings
                                   (`compute.worker.earnings`, read from the chain)
    POST /api/compute/keys         a new key in the keyring (the mnemonic is not sent to the page: no key
                                   material leaves this process; `trolly-wallet keys export` backs it up)
    POST /api/compute/preflight    `trolly-worker preflight`'s measurement, run as a child (`worker_process.py`)
    POST /api/compute/start        the worker set up (`init`, once) and started with the key and its password
    POST /api/compute/stop         the worker stopped
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from trolly.compute.worker.earnings import worker_earnings
from trolly.wallet.errors import QueryFailed, WalletError
from trolly.wallet.proven_views import prove_account, prove_worker

from .config import CONFIG, ConsoleConfig
from .responses import Refusal, answer, json_body, password_field, refusal_of, text_field
from .signing import unlock
from .worker_process import LocalWorker, WorkerRefused

WORKER = web.AppKey("worker", LocalWorker)


def add_routes(app: web.Application, client_key: web.AppKey) -> None:
    async def overview(request: web.Request) -> web.Response:
        return await answer(_overview(request.app[client_key], request.app[CONFIG], request.app[WORKER]))

    async def preflight(request: web.Request) -> web.Response:
        return await answer(_preflight(request.app[WORKER]))

    async def start(request: web.Request) -> web.Response:
        return await answer(_start(request))

    async def stop(request: web.Request) -> web.Response:
        return web.json_response(await request.app[WORKER].stop())

    app.router.add_get("/api/compute", overview)
    app.router.add_post("/api/compute/keys", create_key)
    app.router.add_post("/api/compute/preflight", preflight)
    app.router.add_post("/api/compute/start", start)
    app.router.add_post("/api/compute/stop", stop)


async def _overview(client, config: ConsoleConfig, worker: LocalWorker) -> dict:
    """Each key's balance and the worker's registration, proven (`proved at height H` beside each: one block's
    wait per refresh, however many keys), its earnings and this machine's state."""
    infos = config.keyring().list()
    accounts = await asyncio.gather(*(prove_account(client, info.address) for info in infos))
    keys = [{"name": info.name, "address": info.address, "balance": account.balance, "proof": proven.proof_json()}
            for info, (account, proven) in zip(infos, accounts)]
    status = worker.status()
    registration = earnings = None
    address = next((k["address"] for k in keys if k["name"] == status["key"]), None)
    if address is not None:
        try:
            registered, proven = await prove_worker(client, address)
            registration = {**registered.to_answer(), "proof": proven.proof_json()}
        except QueryFailed:
            registration = None  # not registered yet: `start` registers it
        earnings = (await worker_earnings(client, address)).to_json() if registration else None
    saved = worker.saved_preflight()
    preflight = saved.lines() if saved is not None else None
    return {"keys": keys, "worker": status, "registration": registration, "earnings": earnings,
            "preflight": preflight}


async def create_key(request: web.Request) -> web.Response:
    config = request.app[CONFIG]
    try:
        body = await json_body(request)
        name = text_field(body, "name")
        password = password_field(body, "new-password")
        keyring = config.keyring(password)
        info, _mnemonic = await asyncio.to_thread(keyring.create, name)  # the mnemonic stays here, unshown
    except Refusal as refusal:
        return refusal.response()
    except WalletError as error:
        refusal = refusal_of(error, "new-key-name")
        field = "new-password" if refusal.field == "password" or "password" in str(error) else refusal.field
        return Refusal(str(refusal), field).response()
    return web.json_response({"name": info.name, "address": info.address})


async def _preflight(worker: LocalWorker) -> dict:
    try:
        measured = await worker.preflight()
    except WorkerRefused as refused:
        raise Refusal(str(refused), status=500) from None
    return {"lines": measured.lines(), "preflight": measured.to_json()}


async def _start(request: web.Request) -> dict:
    config = request.app[CONFIG]
    body = await json_body(request)
    key_name = text_field(body, "key")
    password = password_field(body, "worker-password")
    try:
        await asyncio.to_thread(unlock, config, key_name, password)  # a wrong password starts nothing
    except WalletError as error:
        refusal = refusal_of(error, "worker-key")
        raise Refusal(str(refusal), "worker-password" if refusal.field == "password" else refusal.field) from None
    try:
        return await request.app[WORKER].start(key_name, password)
    except WorkerRefused as refused:
        raise Refusal(str(refused), "worker-key") from None
