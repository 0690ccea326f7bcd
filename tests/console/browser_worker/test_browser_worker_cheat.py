"""A tab that cheats is caught and slashed as a native cheater is (issue 37 item 3, the page's test switch): on a
solo localnet, a tab opened as a test with `cheat=skipped_steps` (every segment trains half its steps and claims
them all) and a native torch worker train a digits MLP task allowing `wasm32`. The verifier replays the tab's
sampled segments with the kernel, they fail, the chain slashes the tab and the page shows it; the honest native
worker is paid. Meanwhile another tab asked to join a torch-only task is told the task does not allow the wasm32
kernel, with nothing signed (its account never used a nonce)."""

from __future__ import annotations


import pytest

from browser_worker_helpers import browser_localnet, WAIT_MS, chromium, create_key, join, message, register, \
    serving_blobs, skip_without_the_page, worker_tab
from localnet_helpers import query, task_ended
from test_browser_worker_e2e import browser_task_spec
from trolly.compute.wasm.profile import PROFILE_ID
from trolly.localnet.demo_tasks import digits_data

pytestmark = pytest.mark.slow
sync_api = skip_without_the_page(pytest)


def test_a_cheating_tab_is_caught_by_replay_and_slashed(tmp_path):
    with browser_localnet(tmp_path, workers=1) as net:
        env, wallet, honest_page = net.env, net.wallet, net.page
        page = honest_page + "&test=1&cheat=skipped_steps"
        data = digits_data(tmp_path / "data")
        with serving_blobs(data.store) as data_url, chromium(sync_api) as browser:
            tab = worker_tab(browser, page)
            cheater = create_key(tab)
            wallet("tx", "send", cheater, "50trl", "--from", "requester", "--yes")
            register(tab)
            spec = browser_task_spec(tmp_path / "spec.json", data.manifest_hash, data_url)
            wallet("task", "submit", str(spec), "--workers", "2", "--budget", "50trl", "--round-blocks", "60",
                   "--from", "requester", "--yes")
            join(tab, 1)
            assert "TEST SWITCH: this tab cheats (skipped_steps)" in tab.inner_text("#message")
            other = worker_tab(browser, honest_page)
            stranger = create_key(other)
            torch_only = browser_task_spec(tmp_path / "torch.json", data.manifest_hash, data_url, kernels=("torch",))
            wallet("task", "submit", str(torch_only), "--workers", "2", "--budget", "50trl", "--from", "requester",
                   "--yes")
            other.click("#refresh-tasks")
            other.click('tr[data-task="2"] button', timeout=WAIT_MS)
            assert message(other) == ("task 2 does not allow the wasm32 kernel a browser trains with: its spec "
                                      "allows torch (determinism.kernels)")
            other.problems.check()
            tab.wait_for_selector("body[data-phase=finished]", timeout=600_000)
            outcome = tab.inner_text("#earn-outcome")
            slashed = tab.inner_text("#earn-slashed")
            tab.problems.check()
        task = task_ended(env["TROLLY_NODE"], timeout=300.0)
        assert query(env["TROLLY_NODE"], f"/account/{stranger}")["nonce"] == 0  # nothing signed by the refused tab

        member = next(m for m in task["members"] if m["worker"] == cheater)
        assert member["status"] == "slashed" and member["slashed"] > 0, member
        assert outcome.startswith("slashed") and slashed == f"{member['slashed']} utrl"
        mine = [c for r in task["round_details"] for c in r["commitments"] if c["worker"] == cheater]
        assert mine and all(c["determinism_profile"] == PROFILE_ID for c in mine)
        assert mine[0]["outcome"] == "failed" and "fail" in mine[0]["decisions"], mine[0]
        honest = next(m for m in task["members"] if m["worker"] != cheater)
        assert honest["paid"] > 0 and honest["slashed"] == 0, honest
