"""Browser workers on a solo localnet, real processes throughout (issue 37 item 2): two Chromium tabs on the
console's worker page and one native torch worker train a digits MLP task allowing `wasm32`. The tabs create their
keys, are funded, register with validator 0's relay, join from the page, train in their Web Workers, publish
through the relay and commit; the verifier replays every sampled segment (a tab's under wasmtime) and each passes,
every member is paid, and the final weights each tab reported are the chain's and the requester's.

The screenshot of the README is taken here, of a tab mid-task (written to docs/images/ when
TROLLY_UPDATE_DOCS_IMAGES=1, else to test-artifacts/)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from browser_worker_helpers import browser_localnet, ROOT, chromium, create_key, join, register, serving_blobs, \
    skip_without_the_page, worker_tab
from localnet_helpers import task_ended
from trolly.compute.spec import example_spec
from trolly.compute.wasm.profile import PROFILE_ID
from trolly.localnet.demo_tasks import digits_data

pytestmark = pytest.mark.slow
sync_api = skip_without_the_page(pytest)

SCREENSHOT = "browser-worker.png"


def browser_task_spec(path: Path, manifest_hash: str, data_url: str, rounds: int = 2,
                      kernels: tuple[str, ...] = ("torch", "wasm32")) -> Path:
    """A digits MLP allowing wasm32 (unless `kernels` says otherwise), as short as the protocol allows, its data at
    `data_url`."""
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [32]}},
                            determinism={"threads": 1, "kernels": list(kernels)})
    document["dataset"]["urls"] = [data_url]  # served with CORS: a tab fetches the digits from there
    document["training"].update(rounds=rounds, inner_steps=20, batch_size=16, checkpoint_every=5)
    path.write_text(json.dumps(document))
    return path


def screenshot_place() -> Path:
    if os.environ.get("TROLLY_UPDATE_DOCS_IMAGES") == "1":
        return ROOT / "docs" / "images" / SCREENSHOT
    (ROOT / "test-artifacts" / "console").mkdir(parents=True, exist_ok=True)
    return ROOT / "test-artifacts" / "console" / SCREENSHOT


def test_two_tabs_and_a_native_worker_train_a_wasm32_task_verified_paid_and_agreeing(tmp_path):
    with browser_localnet(tmp_path, workers=1) as net:
        env, wallet, page = net.env, net.wallet, net.page
        data = digits_data(tmp_path / "data")
        with serving_blobs(data.store) as data_url, chromium(sync_api) as browser:
            tabs = [worker_tab(browser, page) for _ in range(2)]
            for tab in tabs:
                wallet("tx", "send", create_key(tab), "50trl", "--from", "requester", "--yes")
                assert register(tab).startswith("yes, stake")
            spec = browser_task_spec(tmp_path / "spec.json", data.manifest_hash, data_url)
            wallet("task", "submit", str(spec), "--workers", "3", "--budget", "50trl", "--round-blocks", "60",
                   "--from", "requester", "--yes")
            for tab in tabs:
                join(tab, 1)
            tabs[0].wait_for_function("document.querySelector('#segment-progress').value >= 2", timeout=300_000)
            tabs[0].screenshot(path=str(screenshot_place()), full_page=True)
            for tab in tabs:
                tab.wait_for_selector("body[data-phase=finished]", timeout=600_000)
            reported = [tab.inner_text("#earn-final") for tab in tabs]
            paid = [tab.inner_text("#earn-paid") for tab in tabs]
            kernels = [tab.inner_text("#work-kernel") for tab in tabs]
            for tab in tabs:
                tab.problems.check()
        task = task_ended(env["TROLLY_NODE"], timeout=120.0)  # outside Playwright's event loop

        assert task["status"] == "completed", task
        trained = [r for r in task["round_details"] if not r["final_report"]]
        commitments = [c for r in trained for c in r["commitments"]]
        profiles = [c["determinism_profile"] for c in commitments]
        assert profiles.count(PROFILE_ID) == 2 * len(trained), profiles  # both tabs, every round
        assert all(c["outcome"] == "passed" for c in commitments), [c["outcome"] for c in commitments]
        verdicts = [v["verdict"] for c in commitments for v in c["verdicts"]]
        assert verdicts and set(verdicts) == {"pass"}  # every sampled segment, the tabs' replayed by the kernel
        assert len(task["members"]) == 3 and all(member["paid"] > 0 for member in task["members"]), task["members"]
        assert kernels == ["WebAssembly", "WebAssembly"]
        assert all(text.endswith(" utrl") and int(text.split()[0]) > 0 for text in paid), paid
        assert reported == [task["final_weights_hash"]] * 2
        fetched = json.loads(wallet("task", "fetch", "1", "-o", "model", "--json").stdout)
        assert fetched["final_weights_hash"] == task["final_weights_hash"]
