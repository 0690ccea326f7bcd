"""The console's web server: the JSON API the pages read, their live updates, and the built front end.

    GET  /?token=...             the access token: opens a session and redirects to / (`security.py`)
    GET  /                       the page (console/web/index.html), which loads the built bundle
    GET  /assets/...             the bundle `make setup` builds into console/web/dist
    GET  /worker                 the browser worker's page (`worker_page.py`)
    GET  /favicon.svg            the page's icon (also answered at /favicon.ico, where browsers look unasked)
    GET  /api/session            this session's CSRF token
    GET  /api/node               what the console last knew of the node (up or down, last height seen)
    GET  /api/events             server-sent events: a `node` event whenever the node's state changes
    GET  /api/network            height, block time, validators, recent blocks and transactions
    GET  /api/tasks?after=N      one page of tasks
    GET  /api/tasks/<id>         a whole task
    GET  /api/search?q=...       a task id, a transaction hash or an address
    GET  /api/tasks/<id>/chart   held-out loss and accuracy per verified round, as far as computed, and the
                                 task's baseline when measured (`baselines.py`; reads only)
    POST /api/tasks/<id>/chart   the same, after starting the task's chart job if rounds settled since (a
                                 background job that fetches a bounded held-out split, `round_charts`)
    POST /api/cache/refresh      forget the cached blocks (a state change: CSRF token and Origin required)

Every request passes `security.py`'s guard first: no session opened by the access token, no answer.

The New task page's API is `new_task_api.py`'s, the Wallet page's `wallet_api.py`'s, the Provide compute
page's `compute_api.py`'s, the Governance page's `gov_api.py`'s; this module registers them.

The page, its icon and the bundle are the package's data (`setup.py`), found through the installed package
(`importlib.resources`), so an installed console (`pip install .`, not only an editable checkout) serves them.

A node that is down answers the reading endpoints with 503 and the node's state (`last_height` included), so a
page says "down since height N" instead of going blank.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
import pathlib

from aiohttp import web

from trolly.wallet.errors import MarketAnswerError, NodeUnreachable, ProofInvalid, QueryFailed, RpcError
from trolly.wallet.proven_views import prove_task
from trolly.wallet.rpc import AsyncRpcClient

from . import chain_reads, compute_api, gov_api, new_task_api, wallet_api, worker_page
from .access import ACCESS, Access
from .baselines import BaselineFit, Baselines, library_fit
from .config import CONFIG, ConsoleConfig
from .node_watch import NodeWatch
from .round_charts import RoundCharts
from .task_following import TaskFollowing
from .templates import local_dataset
from .worker_process import LocalWorker
from .security import CSRF_TOKEN, add_response_headers, make_guard

WEB = pathlib.Path(str(importlib.resources.files(__package__) / "web"))
"""The front end in the installed package: `index.html`, `favicon.svg` and the built bundle in `dist/`."""
DIST = WEB / "dist"
SSE_KEEPALIVE_SECONDS = 15.0
"""A comment line this often keeps an idle event stream open through proxies and lets a closed page be noticed."""

CLIENT = web.AppKey("client", AsyncRpcClient)
WATCH = web.AppKey("watch", NodeWatch)
CACHE = web.AppKey("cache", chain_reads.ReadCache)
CHARTS = web.AppKey("charts", RoundCharts)
STREAMS = web.AppKey("streams", set)
"""The handlers of the open event streams, ended when the server shuts down (an open page would otherwise
hold the shutdown until aiohttp's timeout)."""


def make_app(config: ConsoleConfig, poll_seconds: float = 1.0, access: Access | None = None,
             fit_baseline: BaselineFit | None = None) -> web.Application:
    """The console's app over the node at `config.node_url`, answering the sessions `access`'s token opens (a
    random token when None); the node watch, the followed tasks and the chart jobs start and stop with it.
    `fit_baseline`: what fits a task's baseline (`baselines.py`); the requester library's when None and this
    installation has it."""
    access = access if access is not None else Access()
    app = web.Application(middlewares=[make_guard(access)])
    app.on_response_prepare.append(add_response_headers)
    app[ACCESS] = access
    client = AsyncRpcClient(config.node_url, timeout=5.0)
    app[CONFIG] = config
    app[CLIENT] = client
    app[WATCH] = NodeWatch(client, poll_seconds)
    app[CACHE] = chain_reads.ReadCache()
    app[CHARTS] = RoundCharts(client, config, lambda manifest_hash: local_dataset(
        config.directory("packs"), config.directory("bundled"), manifest_hash),
        Baselines(config, fit_baseline or library_fit()))
    app[new_task_api.FOLLOWING] = TaskFollowing(client, config, on_look=app[CHARTS].chart)
    app[compute_api.WORKER] = LocalWorker(config)

    async def lifecycle(app: web.Application):
        await app[WATCH].start()
        yield
        await app[compute_api.WORKER].stop()
        await app[new_task_api.FOLLOWING].stop()  # first: its looks start chart jobs
        await app[CHARTS].stop()
        await app[WATCH].stop()
        await client.close()

    app[STREAMS] = set()

    async def end_streams(app: web.Application) -> None:
        for handler in app[STREAMS]:
            handler.cancel()

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(end_streams)
    app.router.add_get("/", index)
    app.router.add_get("/favicon.svg", favicon)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get("/api/session", session)
    app.router.add_get("/api/node", node_state)
    app.router.add_get("/api/events", events)
    app.router.add_get("/api/network", network)
    app.router.add_get("/api/tasks", tasks)
    app.router.add_get("/api/tasks/{number:\\d+}", task)
    app.router.add_get("/api/tasks/{number:\\d+}/chart", task_chart)
    app.router.add_post("/api/tasks/{number:\\d+}/chart", start_task_chart)
    app.router.add_get("/api/search", search)
    app.router.add_post("/api/cache/refresh", refresh_cache)
    new_task_api.add_routes(app, CLIENT)
    wallet_api.add_routes(app, CLIENT, _read)
    compute_api.add_routes(app, CLIENT)
    gov_api.add_routes(app, CLIENT, _read)
    worker_page.add_routes(app, DIST)
    if DIST.is_dir():
        app.router.add_static("/assets/", DIST)
    return app


async def index(request: web.Request) -> web.Response:
    if not (DIST / "app.js").exists():
        return web.Response(status=503, content_type="text/plain",
                            text="The console's front end is not built: run `make setup` (it needs Node.js and npm).")
    return web.FileResponse(WEB / "index.html", headers={"Cache-Control": "no-store"})


async def favicon(request: web.Request) -> web.Response:
    return web.FileResponse(WEB / "favicon.svg", headers={"Cache-Control": "max-age=86400"})


async def session(request: web.Request) -> web.Response:
    return web.json_response({"csrf_token": request[CSRF_TOKEN]}, headers={"Cache-Control": "no-store"})


async def node_state(request: web.Request) -> web.Response:
    return web.json_response(request.app[WATCH].state.to_json())


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the node's state now, then every change, until the page goes away."""
    watch = request.app[WATCH]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    await response.prepare(request)
    queue = watch.subscribe()
    request.app[STREAMS].add(asyncio.current_task())
    try:
        await _send_event(response, "node", watch.state.to_json())
        while True:
            try:
                state = await asyncio.wait_for(queue.get(), SSE_KEEPALIVE_SECONDS)
            except asyncio.TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            await _send_event(response, "node", state.to_json())
    except (ConnectionResetError, asyncio.CancelledError):
        pass  # the page closed or the server stops
    finally:
        watch.unsubscribe(queue)
        request.app[STREAMS].discard(asyncio.current_task())
    return response


async def _send_event(response: web.StreamResponse, name: str, data: dict) -> None:
    await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())


async def network(request: web.Request) -> web.Response:
    return await _read(request, chain_reads.network_overview(request.app[CLIENT], request.app[CACHE]))


async def tasks(request: web.Request) -> web.Response:
    after = request.query.get("after", "0")
    if not after.isdigit():
        raise web.HTTPBadRequest(text="after must be a task id (a whole number)")
    return await _read(request, chain_reads.tasks_page(request.app[CLIENT], int(after)))


async def task(request: web.Request) -> web.Response:
    return await _read(request, chain_reads.task_detail(request.app[CLIENT], int(request.match_info["number"])))


async def task_chart(request: web.Request) -> web.Response:
    """The chart as far as it is computed: a read that starts nothing (an `<img>` on another site could send it)."""
    charts = request.app[CHARTS]
    return web.json_response(charts.answer(charts.current(int(request.match_info["number"]))))


async def start_task_chart(request: web.Request) -> web.Response:
    """The chart, its job started first when rounds settled since it last ran (a state change: POST, guarded)."""
    task_id = int(request.match_info["number"])

    async def reading() -> dict:
        view = (await prove_task(request.app[CLIENT], task_id)).view
        return request.app[CHARTS].answer(request.app[CHARTS].chart(task_id, view))

    return await _read(request, reading())


async def search(request: web.Request) -> web.Response:
    return await _read(request, chain_reads.search(request.app[CLIENT], request.query.get("q", "")))


async def refresh_cache(request: web.Request) -> web.Response:
    cleared = request.app[CACHE].clear()
    state = await request.app[WATCH].check()
    return web.json_response({"cleared_blocks": cleared, "node": state.to_json()})


async def _read(request: web.Request, reading) -> web.Response:
    """Run one reading of the node: its JSON, or what went wrong with the node's state beside it."""
    watch = request.app[WATCH]
    try:
        answer = await reading
    except NodeUnreachable as error:
        state = await watch.check()
        return web.json_response({"error": str(error), "node": state.to_json()}, status=503)
    except QueryFailed as error:
        return web.json_response({"error": str(error), "node": watch.state.to_json()}, status=404)
    except (RpcError, MarketAnswerError, ProofInvalid) as error:  # a node whose answers do not hold: its fault
        return web.json_response({"error": str(error), "node": watch.state.to_json()}, status=502)
    return web.json_response(answer)


async def serve(config: ConsoleConfig, port: int, access: Access, ready=None) -> None:
    """Serve on 127.0.0.1:`port` until cancelled; `ready(address)` is called once it listens, with the address
    to open it at (its access token included)."""
    runner = web.AppRunner(make_app(config, access=access))
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        if ready is not None:
            ready(access.address(f"http://127.0.0.1:{runner.addresses[0][1]}/"))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
    finally:
        await runner.cleanup()
