"""The no-code flow in a real browser, end to end on a localnet (solo engine, one validator and its verifier,
one worker): `trolly-localnet up` starts the web console beside the network and prints its URL; a console with a
password-protected keyring (the localnet's requester key) then takes a CSV upload (packed privately, as `data
pack` packs it: the console delivers the data key to the worker and the validator), shows the live cost, submits
with the password, and its task page follows the rounds as they complete, charts held-out loss and accuracy per
verified round (each W_r matching the chain's hashes), shows a settlement that the chain's own answer confirms,
and downloads the model as `task fetch` writes it. Screenshots go to `test-artifacts/console/`."""

from __future__ import annotations

import contextlib
import io
import json
import time
import zipfile

import pytest

from console_helpers import (ARTIFACTS, PASSWORD, browser_page, chain_query, console_process,
                             skip_without_a_browser)
from localnet_helpers import free_base_port, localnet
from requester_helpers import write_flowers_csv
from trolly.wallet.keyring import WEAKEST_ACCEPTED, Keyring
from trolly.wallet.passwords import PasswordSource

pytestmark = pytest.mark.slow

SYNC_API = skip_without_a_browser()
expect = SYNC_API.expect
ROUNDS = 2


def requester_keyring(localnet_home, home):
    """A file keyring in `home` holding the localnet's requester key (the localnet keeps it in a test keyring)."""
    seed = Keyring(localnet_home / "wallet", "test").signer("requester").seed
    Keyring(home, "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).add_seed("requester", seed)
    return home


@pytest.mark.timeout(900)
def test_a_csv_becomes_a_trained_verified_paid_model_through_the_browser(tmp_path):
    started = time.monotonic()
    home = tmp_path / "localnet"
    up = localnet("up", "-d", "--engine", "solo", "--workers", "1", "--home", str(home), "--base-port",
                  str(free_base_port()), timeout=240.0)
    with contextlib.ExitStack() as stack:
        stack.callback(localnet, "down", "--home", str(home), check=False)
        node = json.loads(localnet("status", "--home", str(home), "-o", "json").stdout)["rpc"]
        printed = [line for line in (up.stdout + up.stderr).splitlines() if "console:" in line]
        assert printed and "http://127.0.0.1:" in printed[0] and "/?token=" in printed[0], up.stdout + up.stderr
        localnet_address = printed[0].split("console:")[1].split()[0]  # the localnet's console, with its token
        localnet_console = localnet_address.split("/?")[0]
        served = stack.enter_context(console_process(node, tmp_path / "console.log", 60.0,
                                                     requester_keyring(home, tmp_path / "home"),
                                                     "--allow-private-addresses"))
        url = served.url
        page = stack.enter_context(browser_page(SYNC_API, served.address, accept_downloads=True))

        page.goto(localnet_address)  # as the person who started the localnet opens what it printed
        page.goto(f"{localnet_console}/#/network")  # the localnet's own console is up beside the network
        page.wait_for_selector('main[data-loaded="#/network"]', timeout=30_000)
        expect(page.locator("#node-status")).to_contain_text("Node up")
        page.goto(f"{localnet_console}/#/new-task")  # it signs with the localnet's test keyring, and says so
        page.wait_for_selector('main[data-loaded="#/new-task"]', timeout=30_000)
        expect(page.locator("#password-hint")).to_contain_text("test keyring")
        expect(page.get_by_label("Key that pays (from this computer's keyring)")).to_contain_text("requester")

        page.goto(f"{url}/#/new-task")
        page.wait_for_selector('main[data-loaded="#/new-task"]', timeout=30_000)
        write_flowers_csv(tmp_path / "flowers.csv")
        page.get_by_label("Digits MLP (tables and text)").check()
        page.get_by_label("Data file (.csv, .jsonl, or .zip of class folders)").set_input_files(
            str(tmp_path / "flowers.csv"))
        page.get_by_role("button", name="Upload and pack").click()
        expect(page.locator("#pack-summary")).to_contain_text("large, medium, small", timeout=30_000)
        expect(page.locator("#pack-summary")).to_contain_text("yes (encrypted)")  # private, as `data pack` packs
        page.get_by_label("Rounds").fill(str(ROUNDS))
        page.get_by_label("Budget (what you escrow; the unspent part is refunded)").fill("30trl")
        cost = page.locator("#cost")
        expect(cost).to_contain_text("collateral per worker", timeout=30_000)
        page.wait_for_function("() => document.getElementById('cost').innerText.includes('rounds\\n2')",
                               timeout=15_000)
        page.get_by_label("Keyring password (used once to sign, never stored)").fill(PASSWORD)
        page.get_by_role("button", name="Sign and submit the task").click()
        result = page.locator("#submit-result")
        expect(result).to_contain_text("submitted in block", timeout=60_000)
        task_id = int(result.get_attribute("data-task-id"))
        page.screenshot(path=str(ARTIFACTS / "no-code-submitted.png"), full_page=True)

        page.get_by_role("link", name=f"Follow task {task_id}").click()
        page.wait_for_selector(f'main[data-loaded="#/tasks/{task_id}"]', timeout=30_000)
        facts = page.locator("dl.facts").first
        try:
            expect(facts).to_contain_text("completed", timeout=300_000)  # live: followed without a reload
        except AssertionError:
            page.screenshot(path=str(ARTIFACTS / "no-code-failed.png"), full_page=True)
            raise AssertionError(f"task {task_id} did not complete: {chain_query(node, f'/market/task/{task_id}')}\n"
                                 f"{localnet('logs', 'worker-0', '--home', str(home), check=False).stdout[-4000:]}")
        expect(page.locator("#chart-progress")).to_contain_text(f"Every round evaluated ({ROUNDS} rounds)",
                                                                timeout=300_000)
        evaluation = page.get_by_role("table", name="Held-out evaluation per round")
        rows = evaluation.locator("tbody tr")
        expect(rows).to_have_count(ROUNDS + 1)
        assert evaluation.locator("tbody tr td:nth-child(4)").all_inner_texts() == ["yes"] * (ROUNDS + 1)
        accuracies = [float(text) for text in evaluation.locator("tbody tr td:nth-child(3)").all_inner_texts()]
        assert accuracies[-1] >= 0.9, accuracies
        assert page.locator("#round-chart canvas").count() == 1
        page.screenshot(path=str(ARTIFACTS / "no-code-task.png"), full_page=True)

        chain = chain_query(node, f"/market/task/{task_id}")
        shown = dict(zip(page.locator("dl.facts").first.locator("dt").all_inner_texts(),
                         page.locator("dl.facts").first.locator("dd").all_inner_texts()))
        assert chain["status"] == "completed" and chain["escrow_remaining"] == 0
        assert chain["paid_workers"] > 0
        assert chain["paid_workers"] + chain["paid_fees"] + chain["refunded"] == chain["budget"]
        for term, key in (("paid to workers", "paid_workers"), ("paid in verifier fees", "paid_fees"),
                          ("refunded", "refunded"), ("budget", "budget")):
            assert shown[term] == f"{chain[key] / 1e6:,.6f}".rstrip("0").rstrip(".") + " TRL", (term, shown[term])
        assert shown["final weights"] == chain["final_weights_hash"]

        with page.expect_download(timeout=120_000) as download:
            page.get_by_role("link", name="Download the model (zip: model.safetensors, spec.json, labels.json; a "
                                           "table's preprocessing.json)").click()
        archive = zipfile.ZipFile(io.BytesIO(open(download.value.path(), "rb").read()))
        names = sorted(archive.namelist())
        assert names == sorted(f"task-{task_id}/{name}" for name in ("model.safetensors", "spec.json", "labels.json",
                                                                      "preprocessing.json"))
        preprocessing = json.loads(archive.read(f"task-{task_id}/preprocessing.json"))  # from the console's own pack
        assert [column["name"] for column in preprocessing["columns"]], preprocessing
        assert json.loads(archive.read(f"task-{task_id}/labels.json")) == ["large", "medium", "small"]
        from safetensors.torch import load as load_safetensors

        assert load_safetensors(archive.read(f"task-{task_id}/model.safetensors"))
    print(f"no-code browser flow: {time.monotonic() - started:.1f} s")

