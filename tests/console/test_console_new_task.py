"""The New task and Wallet pages' API over HTTP (aiohttp's test client) against a real `trolly-node dev`: an
upload packed as `data pack` packs it or refused with what to fix, the live cost computed by the CLI's own
`plan_task`, a submission signed with a password-protected keyring key (a wrong password, a missing CSRF token,
another Origin: refused, nothing changed on chain), the data served by the console, and the wallet's preview,
confirmation and signed send."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import zipfile

import nacl.signing
import pytest
from aiohttp import FormData

from console_helpers import (DEV_ADDRESS, PASSWORD, csrf_token, file_keyring, logistic_baseline, own_origin,
                             with_console)
from dev_node import dev_node, send_included
from requester_helpers import PEOPLE_HEADER, iris_like, people_table, write_csv
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.chain.market.data_keys import data_key_hash
from trolly.chain.market.params import MarketParams
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.compute.data.encryption import open_data_key
from trolly.compute.blobs import AddressPolicy
from trolly.compute.data.fetch import DatasetBounds, DatasetFetcher
from trolly.console import uploads
from trolly.console.security import CSRF_HEADER
from trolly.console.server import CLIENT
from trolly.compute.data.packing import TASK_KEYS, open_packed, task_copy
from trolly.console.templates import TEMPLATES, build_spec, uploaded
from trolly.wallet.market_queries import find_data_key, get_task_overview
from trolly.wallet.tasks import plan_task

TRL = 10**6
OTHER = encode_address(bytes(range(1, 21)))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with dev_node(tmp_path_factory.mktemp("console-new-task") / "node") as url:
        yield url


@pytest.fixture
def home(tmp_path):
    return file_keyring(tmp_path / "home")


def csv_bytes(tmp_path, rows=None) -> bytes:
    return write_csv(tmp_path / "iris.csv", rows or iris_like()).read_bytes()


async def upload(client, name: str, data: bytes, **fields) -> tuple[int, dict]:
    form = FormData()
    form.add_field("file", data, filename=name, content_type="application/octet-stream")
    for key, value in fields.items():
        form.add_field(key, value)
    response = await client.post("/api/new-task/upload", data=form, headers=await guard_headers(client))
    return response.status, await response.json()


async def guard_headers(client) -> dict:
    return {"Origin": own_origin(client), CSRF_HEADER: await csrf_token(client)}


async def tasks_on_chain(client) -> list:
    return (await (await client.get("/api/tasks")).json())["tasks"]


def test_a_csv_upload_is_packed_and_files_that_are_not_datasets_are_refused_with_what_to_fix(node, home, tmp_path):
    async def check(client):
        packed = await upload(client, "iris.csv", csv_bytes(tmp_path))  # private unless asked, as `data pack`
        public = await upload(client, "iris.csv", csv_bytes(tmp_path), private="off")
        words = await upload(client, "plans.csv", b"size,city,label\n1,Paris,x\n2,,y\n3,Lyon,x\n4,Paris,y\n"
                                                  b"5,Lyon,x\n6,Paris,y\n")
        kept = await upload(client, "people.csv", people_csv(tmp_path), keep_columns=" customer_id , ")
        not_data = await upload(client, "notes.txt", b"hello")
        one_label = await upload(client, "one.csv", b"a,b,label\n1,2,x\n3,4,x\n5,6,x\n")
        empty = await upload(client, "empty.csv", b"")
        no_file = await client.post("/api/new-task/upload", headers=await guard_headers(client),
                                    data=FormData({"label_column": "x"}, default_to_multipart=True))
        return packed, public, words, kept, not_data, one_label, empty, (no_file.status, await no_file.json())

    packed, public, words, kept, not_data, one_label, empty, no_file = with_console(node, check, home=home)
    status, summary = packed
    assert status == 200 and summary["format"] == "csv" and summary["labels"] == ["setosa", "virginica"]
    assert summary["train_samples"] + summary["test_samples"] == 40 and summary["private"] is True
    assert (home / "console" / "packs" / summary["pack"] / "dataset.json").exists()
    assert (home / "console" / "packs" / summary["pack"] / "data.key").stat().st_mode & 0o777 == 0o600
    assert public[1]["private"] is False and not (home / "console" / "packs" / public[1]["pack"] / "data.key").exists()
    assert not any((home / "console" / "uploads").iterdir())  # the raw upload is gone
    for status, refusal in (not_data, one_label, empty, no_file):
        assert status == 400 and refusal["field"] == "file"
    assert ".csv file with a header row" in not_data[1]["error"]
    assert "at least two labels" in one_label[1]["error"]
    assert "empty" in empty[1]["error"] and "choose a file" in no_file[1]["error"]
    columns = {entry["column"]: entry for entry in words[1]["columns"]}  # a column of words and a missing cell
    assert columns["city"]["done"].startswith("one-hot") and columns["city"]["imputed"] == 1
    assert words[1]["imputed_cells"] == 1 and columns["size"]["done"].startswith("standardized")
    kept_columns = {entry["column"]: entry for entry in kept[1]["columns"]}  # the page's keep_columns field
    assert kept[0] == 200 and kept_columns["customer_id"]["kind"] == "words", kept
    assert len(list((home / "console" / "packs").iterdir())) == 4  # a refusal packs nothing


def test_an_upload_over_the_size_bound_is_refused_before_it_is_kept(node, home, tmp_path, monkeypatch):
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 1000)

    async def check(client):
        return await upload(client, "iris.csv", csv_bytes(tmp_path, iris_like(200)))

    status, refusal = with_console(node, check, home=home)
    assert status == 400 and "larger than" in refusal["error"] and refusal["field"] == "file"
    assert not (home / "console" / "packs").exists() or not any((home / "console" / "packs").iterdir())


def zip_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, data in entries.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def png(shade: int, size: tuple[int, int] = (8, 8)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", size, shade).save(buffer, "PNG")
    return buffer.getvalue()


def test_a_zip_of_class_folders_is_packed_and_a_zip_that_climbs_out_is_refused(node, home, tmp_path):
    images = {f"shapes/{label}/{i}.png": png(shade + i) for label, shade in (("dark", 10), ("light", 200))
              for i in range(6)}

    wide = {f"{label}/{i}.png": png(shade + i, (6, 2)) for label, shade in (("dark", 10), ("light", 200))
            for i in range(6)}

    async def plan(client, pack: str, template: str):
        response = await client.get("/api/new-task/plan", params={"template": template, "pack": pack,
                                                                   "budget": "50trl", "workers": "1", "rounds": "2"})
        return response.status, await response.json()

    async def check(client):
        packed = await upload(client, "shapes.zip", zip_of(images))
        wide_pack = await upload(client, "wide.zip", zip_of(wide))
        climbing = await upload(client, "evil.zip", zip_of({"a/1.png": png(1), "../../escaped.png": png(2)}))
        broken = await upload(client, "broken.zip", b"PK\x03\x04 not a zip")
        return (packed, climbing, broken, await plan(client, packed[1]["pack"], "image-cnn"),
                await plan(client, wide_pack[1]["pack"], "image-cnn"))

    packed, climbing, broken, cnn, not_square = with_console(node, check, home=home)
    assert cnn[0] == 200 and cnn[1]["plan"]["rounds"] == 2  # 8x8 grey images: the CNN's shape
    assert not_square[0] == 400 and not_square[1]["field"] == "template"  # 6x2 images: 12 features, no square
    assert "square images" in not_square[1]["error"], not_square
    assert packed[0] == 200 and packed[1]["format"] == "images" and packed[1]["labels"] == ["dark", "light"]
    assert packed[1]["input_size"] == 64
    assert climbing[0] == 400 and "outside" in climbing[1]["error"]
    assert broken[0] == 400 and "not a readable zip" in broken[1]["error"]
    assert not list(tmp_path.parent.rglob("escaped.png"))


def test_texts_uploaded_for_the_lora_template_are_token_ids_that_only_it_trains_on(node, home):
    lines = [json.dumps({"text": f"{word} number {i} is here", "label": word}) for word in ("alpha", "beta")
             for i in range(5)]

    async def check(client):
        status, summary = await upload(client, "texts.jsonl", "\n".join(lines).encode(), template="lora-text")
        query = {"template": "lora-text", "pack": summary["pack"], "budget": "50trl", "workers": "1", "rounds": "2"}
        lora = await client.get("/api/new-task/plan", params=query)
        mlp = await client.get("/api/new-task/plan", params={**query, "template": "digits-mlp"})
        return status, summary, (lora.status, await lora.json()), (mlp.status, await mlp.json())

    status, summary, lora, mlp = with_console(node, check, home=home)
    assert status == 200 and summary["labels"] == ["alpha", "beta"] and summary["context"] > 0
    assert lora[0] == 200 and lora[1]["plan"]["rounds"] == 2
    assert mlp[0] == 400 and "does not train on tokens data" in mlp[1]["error"]


def test_the_live_cost_is_the_clis_plan_and_bad_fields_are_named(node, home, tmp_path):
    async def check(client):
        status, summary = await upload(client, "iris.csv", csv_bytes(tmp_path))
        query = {"template": "digits-mlp", "pack": summary["pack"], "budget": "50trl", "workers": "2", "rounds": "3"}
        plan = await (await client.get("/api/new-task/plan", params=query)).json()
        refusals = []
        for change in ({"budget": "fifty"}, {"budget": "0.000001trl"}, {"workers": "0"}, {"template": "image-cnn"},
                       {"template": "nope"}, {"pack": "missing-pack-id"}):
            response = await client.get("/api/new-task/plan", params={**query, **change})
            refusals.append((response.status, await response.json()))
        bundled_plans = {}
        for template in TEMPLATES:
            response = await client.get("/api/new-task/plan", params={**query, "pack": "", "template": template})
            bundled_plans[template] = (response.status, await response.json())
        return summary, plan, refusals, bundled_plans

    summary, plan, refusals, bundled_plans = with_console(node, check, home=home)
    data = uploaded(open_packed(home / "console" / "packs" / summary["pack"]), TEMPLATES["digits-mlp"])
    expected = plan_task(build_spec(TEMPLATES["digits-mlp"], data, 3, ["http://127.0.0.1:8600"]), MarketParams(),
                         50 * TRL, None, 2, 2, None)
    assert plan["plan"]["cost"] == expected.cost and plan["plan"]["collateral"] == expected.collateral
    assert plan["plan"]["reward_per_round"] == expected.reward_per_round and plan["plan"]["cost"] <= 50 * TRL
    assert [(status, body["field"]) for status, body in refusals] == [
        (400, "budget"), (400, "budget"), (400, "workers"), (400, "file"), (400, "template"), (400, "file")]
    assert "does not train on csv data" in refusals[3][1]["error"]
    for template, (status, answer) in bundled_plans.items():  # no upload: each template's bundled dataset
        assert status == 200 and answer["data"] == f"the bundled {TEMPLATES[template].bundled} dataset", answer
        assert answer["plan"]["rounds"] == 3 and answer["plan"]["cost"] <= 50 * TRL


def test_a_wrong_password_or_a_forged_request_submits_nothing_and_the_right_one_submits_and_serves_the_data(
        node, home, tmp_path):
    async def check(client):
        status, summary = await upload(client, "iris.csv", csv_bytes(tmp_path), private="off")  # anyone may fetch it
        form = {"template": "digits-mlp", "pack": summary["pack"], "budget": "20trl", "workers": "1", "rounds": "2",
                "key": "dev"}
        before = await tasks_on_chain(client)
        headers = await guard_headers(client)
        wrong = await client.post("/api/new-task/submit", json={**form, "password": "not it"}, headers=headers)
        no_token = await client.post("/api/new-task/submit", json={**form, "password": PASSWORD},
                                     headers={"Origin": own_origin(client)})
        elsewhere = await client.post("/api/new-task/submit", json={**form, "password": PASSWORD},
                                      headers={**headers, "Origin": "http://evil.example"})
        unchanged = await tasks_on_chain(client)
        right = await client.post("/api/new-task/submit", json={**form, "password": PASSWORD}, headers=headers)
        submitted = await right.json()
        served = await DatasetFetcher(summary["manifest_hash"], [submitted["data_url"]],
                                      AddressPolicy(allow_private=True), DatasetBounds(1 << 20, 1 << 40)).in_memory()
        task = await (await client.get(f"/api/tasks/{submitted['task_id']}")).json()
        headers = await guard_headers(client)
        early = await client.post(f"/api/tasks/{submitted['task_id']}/model", headers=headers)
        missing = await client.post("/api/tasks/999/model", headers=headers)
        unfetched = await client.get(f"/api/tasks/{submitted['task_id']}/model")  # a read fetches nothing
        unfinished = ((early.status, await early.json()), (missing.status, await missing.json()),
                      (unfetched.status, await unfetched.json()))
        return unfinished, (before, (wrong.status, await wrong.json()), no_token.status, elsewhere.status, unchanged,
                right.status, submitted, served, task)

    unfinished, answers = with_console(node, check, home=home)
    before, wrong, no_token, elsewhere, unchanged, status, submitted, served, task = answers
    (early, early_answer), (missing, missing_answer), (unfetched, unfetched_answer) = unfinished
    assert early == 409 and "no verified final weights yet" in early_answer["error"]
    assert missing == 404 and "999" in missing_answer["error"]
    assert unfetched == 404 and "not been fetched yet" in unfetched_answer["error"]
    assert not list((home / "console" / "models").glob("*.zip"))  # nothing written for either
    assert wrong[0] == 400 and wrong[1]["field"] == "password" and "wrong keyring password" in wrong[1]["error"]
    assert (no_token, elsewhere) == (403, 403) and unchanged == before
    assert status == 200, submitted
    assert task["requester"] == DEV_ADDRESS and task["budget"] == 20 * TRL and task["rounds"] == 2
    assert task["status"] == "open" and task["reward_per_round"] == submitted["plan"]["reward_per_round"]
    assert served.shape.input_size == 2 and served.shape.num_classes == 2


def test_the_wallet_previews_asks_for_confirmation_and_sends_with_the_password(node, home):
    async def check(client):
        headers = await guard_headers(client)
        overview = await (await client.get("/api/wallet")).json()
        form = {"action": "send", "key": "dev", "to": OTHER, "amount": "1.5trl"}
        preview = await (await client.post("/api/wallet/preview", json=form, headers=headers)).json()
        unconfirmed = await client.post("/api/wallet/sign", json={**form, "password": PASSWORD}, headers=headers)
        wrong = await client.post("/api/wallet/sign", json={**form, "password": "nope", "confirmed": True},
                                  headers=headers)
        bad_to = await client.post("/api/wallet/preview", json={**form, "to": "trolly1bad"}, headers=headers)
        between = await (await client.get("/api/search", params={"q": OTHER})).json()
        sent = await client.post("/api/wallet/sign", json={**form, "password": PASSWORD, "confirmed": True},
                                 headers=headers)
        after = await (await client.get("/api/search", params={"q": OTHER})).json()
        return (overview, preview, unconfirmed.status, (wrong.status, await wrong.json()),
                (bad_to.status, await bad_to.json()), between, (sent.status, await sent.json()), after)

    overview, preview, unconfirmed, wrong, bad_to, between, sent, after = with_console(node, check, home=home)
    (key,) = overview["keys"]
    assert key["name"] == "dev" and key["address"] == DEV_ADDRESS and key["balance"] > 0 and key["validator"]
    assert "seed" not in json.dumps(overview) and "mnemonic" not in json.dumps(overview)
    assert preview["tx"]["total_spend"] == 1_500_000 + preview["tx"]["fee"]
    assert preview["tx"]["messages"][0]["type"].endswith("MsgSend")
    assert unconfirmed == 400 and wrong[0] == 400 and wrong[1]["field"] == "password"
    assert bad_to[0] == 400 and bad_to[1]["field"] == "to"
    assert between["kind"] in ("none", "address") and (between.get("account") or {}).get("balance", 0) == 0
    assert sent[0] == 200 and sent[1]["code"] == 0
    assert after["account"]["balance"] == 1_500_000


def test_a_private_upload_is_submitted_on_its_own_key_and_delivered_to_the_member_by_the_console(node, home,
                                                                                                tmp_path):
    """The console submits a private upload on a copy re-encrypted under a key drawn for the task (committed on
    chain), and once a worker joins and the task runs, its follow loop delivers that key to the worker."""
    worker = dev_key(31)

    async def check(client):
        status, summary = await upload(client, "iris.csv", csv_bytes(tmp_path), private="on")
        form = {"template": "digits-mlp", "pack": summary["pack"], "budget": "20trl", "workers": "1", "rounds": "1",
                "key": "dev", "password": PASSWORD}
        submitted = await (await client.post("/api/new-task/submit", json=form,
                                             headers=await guard_headers(client))).json()
        await asyncio.to_thread(join_as_worker, node, worker, submitted["task_id"])
        box = None
        for _ in range(60):  # the console looks every LOOK_SECONDS
            box = await find_data_key(client.server.app[CLIENT], submitted["task_id"],
                                      encode_address(worker.address))
            if box:
                break
            await asyncio.sleep(0.5)
        task = await get_task_overview(client.server.app[CLIENT], submitted["task_id"])
        chart = home / "console" / "charts" / f"task-{submitted['task_id']}.json"
        for _ in range(60):  # charted by the follow loop itself: no page asked for it
            if chart.exists():
                break
            await asyncio.sleep(0.5)
        return summary, submitted, box, task, json.loads(chart.read_text()) if chart.exists() else None

    summary, submitted, box, task, chart = with_console(node, check, home=home)
    assert chart is not None and [p["round"] for p in chart["points"]] == [0]  # W_0, evaluated on the held-out split
    pack = home / "console" / "packs" / summary["pack"]
    assert summary["private"] is True and (pack / "data.key").exists()
    assert task.private_data and task.data_key_hash
    opened = open_data_key(box.sealed_bytes, nacl.signing.SigningKey(worker.seed))
    assert data_key_hash(opened).hex() == task.data_key_hash  # the task's own key, not the pack's
    assert opened != (pack / "data.key").read_bytes()


def join_as_worker(node: str, worker, task_id: int) -> None:
    """Fund `worker` from the dev account, register it and join task `task_id` with it."""
    send_included(node, dev_key(0), MsgSend(to=worker.address, amount=100 * TRL))
    send_included(node, worker, pb.MsgRegisterWorker(
        stake=20 * TRL, blob_url="http://127.0.0.1:9000",
        hardware=pb.HardwareProfile(device="cpu", samples_per_second=100, memory_mb=1024, threads=1)))
    send_included(node, worker, pb.MsgJoinTask(task_id=task_id))


def people_csv(tmp_path) -> bytes:
    return write_csv(tmp_path / "people.csv", people_table(), PEOPLE_HEADER).read_bytes()


async def submit_private_table(client, tmp_path) -> tuple[dict, dict]:
    """A table with an id, a word column and missing cells, uploaded (private) and submitted with the dev key."""
    status, summary = await upload(client, "people.csv", people_csv(tmp_path), private="on")
    assert status == 200, summary
    form = {"template": "digits-mlp", "pack": summary["pack"], "budget": "20trl", "workers": "1", "rounds": "1",
            "key": "dev", "password": PASSWORD}
    submitted = await client.post("/api/new-task/submit", json=form, headers=await guard_headers(client))
    answer = await submitted.json()
    assert submitted.status == 200, answer
    return summary, answer


async def chart_until(client, task_id: int, done) -> dict:
    """The task page's chart: its POST (which starts the job, as the page does), then its GET until `done`."""
    chart = await (await client.post(f"/api/tasks/{task_id}/chart", headers=await guard_headers(client))).json()
    for _ in range(240):
        if done(chart):
            break
        await asyncio.sleep(0.25)
        chart = await (await client.get(f"/api/tasks/{task_id}/chart")).json()
    return chart


def test_the_console_charts_its_own_private_task_from_its_copy_beside_a_baseline_and_no_other_console_guesses(
        node, home, tmp_path):
    """Issue 34: a requester's console charted its own private task no better than a stranger: it fetched the
    encrypted shards, then said the key "has not been delivered". Now it evaluates each round on the held-out
    split of the task's own re-encrypted copy of the pack (with that copy's key, which it holds), and fits the
    baseline on the copy's training split with the same preprocessing. A console that does not hold the pack
    refuses before fetching anything and says where the task can be charted."""

    async def own(client):
        summary, submitted = await submit_private_table(client, tmp_path)
        chart = await chart_until(client, submitted["task_id"], lambda c: c["points"] and c["baseline"])
        return summary, submitted, chart

    summary, submitted, chart = with_console(node, own, home=home, fit_baseline=logistic_baseline)
    assert chart["state"] != "stopped", chart["problem"]
    (initial,) = chart["points"]  # W_0 of an open task, evaluated on the task's own held-out split
    assert initial["round"] == 0 and initial["loss"] > 0 and 0 <= initial["accuracy"] <= 1
    pack = home / "console" / "packs" / summary["pack"]
    (task_manifest,) = [path.stem for path in (pack / TASK_KEYS).iterdir()]  # the copy the task trains on
    expected = logistic_baseline(task_copy(open_packed(pack), task_manifest).load())
    baseline = chart["baseline"]
    assert baseline["metric"] == "accuracy" and baseline["baseline"] == round(expected["baseline"], 6) > 0.8
    assert baseline["baseline_name"] == "logistic regression (scikit-learn)" and baseline["seconds"] >= 0

    async def stranger(client):
        return await chart_until(client, submitted["task_id"], lambda c: c["state"] == "stopped")

    refused = with_console(node, stranger, home=tmp_path / "another-home", fit_baseline=logistic_baseline)
    assert refused["points"] == [] and refused["baseline"] is None
    assert "private and this console does not hold its pack" in refused["problem"], refused


def test_no_page_or_answer_of_the_console_carries_a_data_key(node, home, tmp_path):
    """A private upload's key and its task's key stay in the pack's folder: every page, bundle and JSON answer
    the console serves after a private table is packed, submitted and charted, in any encoding a key could take
    (raw, hex, base64, a list of its bytes), carries neither."""

    async def everything(client):
        summary, submitted = await submit_private_table(client, tmp_path)
        task_id = submitted["task_id"]
        await chart_until(client, task_id, lambda c: c["points"])
        plan = "/api/new-task/plan?" + "&".join(f"{k}={v}" for k, v in {
            "template": "digits-mlp", "pack": summary["pack"], "budget": "20trl", "workers": "1", "rounds": "1"}.items())
        served = [json.dumps(summary).encode(), json.dumps(submitted).encode()]
        for path in ("/", "/assets/app.js", "/api/session", "/api/node", "/api/network", "/api/tasks",
                     f"/api/tasks/{task_id}", f"/api/tasks/{task_id}/chart", f"/api/search?q={task_id}",
                     "/api/new-task/templates", plan, "/api/wallet", "/api/compute"):
            response = await client.get(path)
            assert response.status == 200, (path, response.status)
            served.append(await response.read())
        started = await client.post(f"/api/tasks/{task_id}/chart", headers=await guard_headers(client))
        served.append(await started.read())
        return summary, b"\n".join(served)

    summary, served = with_console(node, everything, home=home)
    pack = home / "console" / "packs" / summary["pack"]
    keys = [(pack / "data.key").read_bytes(), *[path.read_bytes() for path in (pack / TASK_KEYS).iterdir()]]
    assert len(keys) == 2 and len(served) > 10_000
    for key in keys:
        for encoded in (key, key.hex().encode(), key.hex().upper().encode(), base64.b64encode(key),
                        base64.urlsafe_b64encode(key).rstrip(b"="), ", ".join(map(str, key)).encode(),
                        ",".join(map(str, key)).encode()):
            assert encoded not in served
def test_a_csv_uploaded_for_regression_is_packed_so_and_planned_and_a_word_target_is_refused(node, home, tmp_path):
    """The page's task select (issue 34 item 3): `task=regression` packs the label column as a number to predict,
    the plan's spec declares it, and a column of words is refused beside the file, naming the column."""
    rows = [(i, round(0.5 * i, 2), ["north", "south"][i % 2], round(3.0 * i + 1.5, 2)) for i in range(30)]
    table = write_csv(tmp_path / "prices.csv", rows, header="n,area,city,price").read_bytes()

    async def check(client):
        status, summary = await upload(client, "prices.csv", table, task="regression")
        query = {"template": "digits-mlp", "pack": summary.get("pack", ""), "budget": "50trl", "workers": "1",
                 "rounds": "2"}
        plan = await client.get("/api/new-task/plan", params=query)
        words = await upload(client, "prices.csv", table, task="regression", label_column="city")
        return (status, summary), (plan.status, await plan.json()), words

    (status, summary), (plan_status, plan), words = with_console(node, check, home=home)
    assert status == 200 and summary["task"] == "regression" and summary["target"]["column"] == "price"
    assert plan_status == 200 and "predicting price" in plan["data"], plan
    data = uploaded(open_packed(home / "console" / "packs" / summary["pack"]), TEMPLATES["digits-mlp"])
    assert json.loads(build_spec(TEMPLATES["digits-mlp"], data, 2, ["http://127.0.0.1:8600"]))["dataset"]["task"] \
        == "regression"
    assert words[0] == 400 and words[1]["field"] == "file" and "column 'city': 'north' is not a number" in \
        words[1]["error"]
