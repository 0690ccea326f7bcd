"""A tab closed mid-task misses its round and is dropped, never slashed, and a native worker replaces it (issue 37
item 2): on a solo localnet, a tab and worker-0 train a six-round digits MLP task allowing `wasm32` while
worker-1 is stopped. The tab commits round 0 and is closed; round 1 closes without it, the chain drops it with
the missed-round penalty and opens its slot; the native worker left out of the task (worker-1 is started once the
tab is a member) joins as the replacement and trains the last rounds; the task completes, the replacement is
paid. Six rounds: a slot opens at the round after the drop, and a round with one member left settles in
seconds, so the replacement may join a round or two later."""

from __future__ import annotations


import pytest

from browser_worker_helpers import browser_localnet, chromium, create_key, join, register, serving_blobs, \
    skip_without_the_page, worker_tab
from localnet_helpers import localnet, task_ended
from test_browser_worker_e2e import browser_task_spec
from trolly.localnet.demo_tasks import digits_data

pytestmark = pytest.mark.slow
sync_api = skip_without_the_page(pytest)


def test_a_tab_closed_mid_task_is_dropped_without_a_slash_and_replaced(tmp_path):
    with browser_localnet(tmp_path, workers=2) as net:
        home, wallet, page = net.home, net.wallet, net.page
        env = net.env
        localnet("kill", "worker-1", "--home", str(home))  # the spare: started once the tab is a member
        data = digits_data(tmp_path / "data")
        with serving_blobs(data.store) as data_url, chromium(sync_api) as browser:
            tab = worker_tab(browser, page)
            closed = create_key(tab)
            wallet("tx", "send", closed, "50trl", "--from", "requester", "--yes")
            register(tab)
            spec = browser_task_spec(tmp_path / "spec.json", data.manifest_hash, data_url, rounds=6)
            wallet("task", "submit", str(spec), "--workers", "2", "--budget", "50trl", "--round-blocks", "30",
                   "--from", "requester", "--yes")
            join(tab, 1)
            localnet("start", "worker-1", "--home", str(home))  # whichever native is left out waits for a slot
            tab.wait_for_function("document.querySelector('#work-log').textContent.includes('round 0: committed')",
                                  timeout=300_000)
            tab.close()  # mid-task: round 1 is never trained
        task = task_ended(env["TROLLY_NODE"], timeout=600.0)
        said = {name: (home / "logs" / f"{name}.log").read_text()[-2000:] for name in ("worker-0", "worker-1")
                if (home / "logs" / f"{name}.log").exists()}

        assert task["status"] == "completed", task
        dropped = next(m for m in task["members"] if m["worker"] == closed)
        assert dropped["status"] == "dropped" and dropped["slashed"] == 0 and dropped["penalized"] > 0, dropped
        assert dropped["rounds_passed"] == 1  # round 0, committed before the tab closed
        replacement = next((m for m in task["members"] if m["first_round"] > 0), None)
        assert replacement is not None, said
        assert replacement["worker"] != closed and replacement["index"] == dropped["index"], replacement
        assert replacement["paid"] > 0 and replacement["status"] in ("active", "finished"), replacement
