"""The New task page's API: templates, an upload packed, the live cost, the signed submission, the model.

    GET  /api/new-task/templates     the templates and the keyring's keys (names and addresses only)
    POST /api/new-task/upload        a file (multipart), packed; its summary, or a refusal beside the file
    GET  /api/new-task/plan?...      cost and collateral for template, pack, budget, workers, rounds, computed by
                                     the requester library the CLI uses (`wallet.requester.plan_order`)
    POST /api/new-task/submit        the same, signed with a keyring key unlocked by the password sent, and sent
                                     (`wallet.requester.submit_task`, with its settings); the console then follows
                                     the task (`task_following.py`): serves the data, delivers a private task's keys
    POST /api/tasks/<id>/model       the final model fetched (each blob bounded, as every blob fetch is) and
                                     checked, as `task fetch` does, and zipped, once
    GET  /api/tasks/<id>/model       that zip, when it was fetched (a read: it fetches nothing)

Every state change passes `security.py`'s guard (CSRF token and Origin) before it reaches a handler here.
"""

from __future__ import annotations

import asyncio
import io
import pathlib
import tempfile
import zipfile

from aiohttp import web

from trolly.chain.market.data_keys import data_key_hash
from trolly.compute.blobs import BlobStore
from trolly.compute.errors import ComputeError
from trolly.compute.requester.serving import ServingThread
from trolly.wallet.errors import NodeUnreachable, WalletError
from trolly.wallet.requester import (DEFAULT_ROUND_BLOCKS, JOIN_BLOCKS, ROUND_BLOCKS_BY_ARCH, SAMPLES_PER_WORKER,
                                     TaskOrder, plan_order, submit_task)
from trolly.wallet.tasks import TaskPlan

from . import uploads
from .config import CONFIG, ConsoleConfig
from .responses import (Refusal, amount_field, answer, json_body, password_field, refusal_of, text_field,
                        whole_field)
from .signing import sign_and_send
from .task_following import Followed, TaskFollowing
from .templates import TEMPLATES, SpecRefused, TaskData, Template, build_spec, bundled, local_pack, packing_model, uploaded

MAX_WORKERS = 64
MAX_ROUNDS = 50

FOLLOWING = web.AppKey("following", TaskFollowing)


def add_routes(app: web.Application, client_key: web.AppKey) -> None:
    async def plan(request: web.Request) -> web.Response:
        return await answer(_plan(request, request.app[client_key]))

    async def submit(request: web.Request) -> web.Response:
        return await answer(_submit(request, request.app[client_key]))

    async def fetch_model(request: web.Request) -> web.Response:
        return await _fetch_model(request, request.app[client_key])

    app.router.add_get("/api/new-task/templates", templates)
    app.router.add_post("/api/new-task/upload", upload)
    app.router.add_get("/api/new-task/plan", plan)
    app.router.add_post("/api/new-task/submit", submit)
    app.router.add_post("/api/tasks/{number:\\d+}/model", fetch_model)
    app.router.add_get("/api/tasks/{number:\\d+}/model", model)


async def templates(request: web.Request) -> web.Response:
    keys = [{"name": key.name, "address": key.address} for key in request.app[CONFIG].keyring().list()]
    return web.json_response({"templates": [t.to_json() for t in TEMPLATES.values()], "keys": keys,
                              "defaults": {"samples_per_worker": SAMPLES_PER_WORKER, "join_blocks": JOIN_BLOCKS,
                                           "round_blocks": DEFAULT_ROUND_BLOCKS,
                                           "round_blocks_by_arch": ROUND_BLOCKS_BY_ARCH},
                              "max_upload_bytes": uploads.MAX_UPLOAD_BYTES,
                              "keyring_backend": request.app[CONFIG].keyring_backend})


async def upload(request: web.Request) -> web.Response:
    config = request.app[CONFIG]
    try:
        packed = await uploads.receive(request, config.directory("uploads"), config.directory("packs"), packing_model)
    except uploads.UploadRefused as refusal:
        return Refusal(str(refusal), "file").response()
    return web.json_response({"pack": packed.directory.name, **{k: v for k, v in packed.summary().items()
                                                                  if k != "directory"}})


def _template(fields) -> Template:
    key = fields.get("template", "")
    if key not in TEMPLATES:
        raise Refusal(f"choose a template: {', '.join(TEMPLATES)}", "template")
    return TEMPLATES[key]


def _task_data(config: ConsoleConfig, template: Template, pack_id: str, for_task: bool = False) -> TaskData:
    """The data the form names; `for_task`: a private pack's copy for the task about to be submitted, under a
    data key drawn for it alone (`compute.data.packing.for_one_task`)."""
    from trolly.compute.data.packing import for_one_task  # loads torch: only when a task is prepared

    try:
        if not pack_id:
            return bundled(template, config.directory("bundled"))
        pack = uploads.find_pack(config.directory("packs"), pack_id)
        return uploaded(for_one_task(pack) if for_task else pack, template)
    except (uploads.UploadRefused, SpecRefused) as refusal:
        raise Refusal(str(refusal), "file") from None
    except ComputeError as error:
        raise Refusal(f"the upload cannot be prepared for a task: {error}", "file") from None


async def _planned(fields, client, config: ConsoleConfig, urls: list[str], data: TaskData | None = None,
                   **terms) -> tuple[TaskData, TaskOrder, TaskPlan]:
    """The data (unless given), the order and the plan the form's fields describe (every refusal names its
    field); `terms`: the order's other settings (the library's defaults unless given)."""
    template = _template(fields)
    budget = amount_field(fields, "budget")
    workers = whole_field(fields, "workers", 1, MAX_WORKERS)
    rounds = whole_field(fields, "rounds", 1, MAX_ROUNDS)
    if data is None:
        data = await asyncio.to_thread(_task_data, config, template, str(fields.get("pack") or ""))
    try:
        spec = build_spec(template, data, rounds, urls)
    except SpecRefused as refusal:
        raise Refusal(str(refusal), "template") from None
    order = TaskOrder(spec, budget, workers, data_key_hash=data_key_hash(data.key) if data.key is not None else b"",
                      **terms)
    try:
        plan = await plan_order(client, order)
    except WalletError as error:
        raise Refusal(str(error), "budget") from None
    return data, order, plan


async def _plan(request: web.Request, client) -> dict:
    config = request.app[CONFIG]
    data, order, plan = await _planned(request.query, client, config, [f"http://{config.data_host}:8600"])
    return {"plan": plan_json(plan), "data": data.description, "private": data.key is not None,
            "spec_bytes": len(order.spec), "round_blocks": order.round_window}


def plan_json(plan: TaskPlan) -> dict:
    return {"rounds": plan.rounds, "workers": plan.workers, "reward_per_round": plan.reward_per_round,
            "cost": plan.cost, "budget": plan.budget, "refund_if_all_paid": plan.refund_if_all_paid,
            "collateral": plan.collateral, "minimum_collateral": plan.minimum_collateral,
            "segments_per_round": plan.segments_per_round, "samples_per_worker": plan.samples_per_worker,
            "key_reserve": plan.key_reserve}


async def _submit(request: web.Request, client) -> dict:
    config = request.app[CONFIG]
    body = await json_body(request)
    key_name = text_field(body, "key")
    password = password_field(body, "password")
    join_blocks = whole_field(body, "join_blocks", 1, 100_000, JOIN_BLOCKS)
    round_blocks = whole_field(body, "round_blocks", 1, 100_000) if body.get("round_blocks") is not None else None
    template = _template(body)
    data = await asyncio.to_thread(_task_data, config, template, str(body.get("pack") or ""), True)
    try:
        server = await asyncio.to_thread(ServingThread(BlobStore(data.store_directory), config.data_host, 0).start)
    except OSError as error:
        raise Refusal(f"cannot serve the data on {config.data_host}: {error.strerror or error}") from None

    async def send(messages):
        return await sign_and_send(client, config, key_name, password, messages)

    try:
        data, order, plan = await _planned(body, client, config, [server.url], data, join_blocks=join_blocks,
                                           round_blocks=round_blocks)
        try:
            submitted = await submit_task(client, order, send, plan)
        except WalletError as error:
            raise refusal_of(error, "key") from None
    except BaseException:
        await asyncio.to_thread(server.stop)
        raise
    request.app[FOLLOWING].follow(Followed(submitted.task_id, data, server,
                                           submitted.requester if data.key is not None else None))
    outcome = submitted.outcome
    return {"task_id": submitted.task_id, "hash": outcome.hash,
            "height": outcome.included.height if outcome.included else None, "plan": plan_json(plan),
            "data_url": server.url, "round_blocks": order.round_window}


def _archive(request: web.Request) -> pathlib.Path:
    return request.app[CONFIG].work / "models" / f"task-{int(request.match_info['number'])}-model.zip"


async def _fetch_model(request: web.Request, client) -> web.Response:
    """Fetch the task's final model as `task fetch` writes it (model.safetensors, spec.json, labels.json; a LoRA
    task's adapter.safetensors too; a table's preprocessing.json, from the console's own pack for a private
    task it submitted) and zip it, once (kept after); where to download it."""
    from trolly.compute.requester.model_files import result_files  # torch, loaded when a model is first fetched
    from trolly.compute.requester.results import fetch_result

    config = request.app[CONFIG]
    task_id = int(request.match_info["number"])
    archive = _archive(request)
    if not archive.exists():
        config.directory("models")
        try:
            result = await fetch_result(client, task_id, config.addresses)
            packed = await asyncio.to_thread(local_pack, config.directory("packs"), result.spec.dataset.manifest_hash)
            extra = await result_files(result, config.addresses, packed)
            await asyncio.to_thread(_zip_result, result, archive, extra)
        except ComputeError as error:
            return Refusal(str(error), status=409).response()
        except NodeUnreachable as error:
            return Refusal(f"the node is down: {error}", status=503).response()
        except WalletError as error:
            return Refusal(str(error), status=404).response()
    return web.json_response({"download": f"/api/tasks/{task_id}/model", "bytes": archive.stat().st_size})


async def model(request: web.Request) -> web.StreamResponse:
    """The zip `POST /api/tasks/<id>/model` made; 404 until then."""
    archive = _archive(request)
    if not archive.exists():
        return Refusal("the model has not been fetched yet: fetch it from the task's page", status=404).response()
    return web.FileResponse(archive, headers={
        "Content-Disposition": f'attachment; filename="{archive.name}"', "Content-Type": "application/zip"})


def _zip_result(result, archive: pathlib.Path, extra: dict[str, bytes]) -> None:
    from trolly.compute.requester.results import write_result

    with tempfile.TemporaryDirectory(dir=archive.parent) as scratch:
        directory = pathlib.Path(scratch) / "model"
        files = write_result(result, directory, extra)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name in files:
                bundle.write(directory / name, f"task-{result.task_id}/{name}")
        partial = archive.with_suffix(".partial")
        partial.write_bytes(buffer.getvalue())
        partial.replace(archive)
