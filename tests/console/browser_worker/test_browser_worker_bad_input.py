"""The page's bad input on a real solo localnet (issue 37, "Bad input"), in Chromium: a relay that refuses the tab's
pushes is shown as a message that says what happened and what to do, and nothing is signed after it (no
commitment, the account's nonce unchanged); a cheat asked for on a page that is not a test's is refused before the
page can sign anything."""

from __future__ import annotations

import time
import urllib.parse

import pytest

from browser_worker_helpers import browser_localnet, chromium, create_key, join, message, register, serving_blobs, \
    skip_without_the_page, worker_tab
from localnet_helpers import query
from test_browser_worker_e2e import browser_task_spec
from trolly.localnet.demo_tasks import digits_data

pytestmark = pytest.mark.slow
sync_api = skip_without_the_page(pytest)


def with_relay_alias(address: str) -> str:
    """The page's address with its relay named `localhost` where the relay knows itself as 127.0.0.1: the same
    server, another URL (what a mistyped or proxied relay address does)."""
    parts = urllib.parse.urlsplit(address)
    options = urllib.parse.parse_qs(parts.query)
    relay = options["relay"][0]
    assert "127.0.0.1" in relay, relay
    options["relay"] = [relay.replace("127.0.0.1", "localhost")]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(options, doseq=True)))


def commitments_of(node: str, task_id: int, worker: str) -> list:
    task = query(node, f"/market/task/{task_id}")
    return [c for r in task.get("round_details", []) for c in r["commitments"] if c["worker"] == worker]


def test_a_relay_that_refuses_the_push_is_explained_and_nothing_is_signed_after_it(tmp_path):
    """Attack (or accident): the tab registered a relay URL the relay does not know itself by, so every push is
    refused (HTTP 421). The page says the round was not committed, why, and what to do; the tab signs nothing
    more (its nonce stays at its registration and join) and commits nothing."""
    with browser_localnet(tmp_path, workers=1) as net:
        node, wallet, page = net.node, net.wallet, net.page
        data = digits_data(tmp_path / "data")
        with serving_blobs(data.store) as data_url, chromium(sync_api) as browser:
            stranger = worker_tab(browser, page + "&cheat=skipped_steps")  # a cheat, but not a test's page
            stranger.fill("#create-password", "tab password 1")
            stranger.click("#create-form button[type=submit]")
            assert message(stranger) == "a cheat is a test switch: this page is not a test's"
            assert stranger.evaluate("document.body.dataset.phase") == "locked"  # never connected, never signed

            tab = worker_tab(browser, with_relay_alias(page))
            address = create_key(tab)
            wallet("tx", "send", address, "50trl", "--from", "requester", "--yes")
            register(tab)
            spec = browser_task_spec(tmp_path / "spec.json", data.manifest_hash, data_url)
            wallet("task", "submit", str(spec), "--workers", "2", "--budget", "50trl", "--round-blocks", "60",
                   "--from", "requester", "--yes")
            join(tab, 1)
            shown = message(tab, timeout=300_000)
            assert shown.startswith("Round 0 was not committed: its checkpoints could not be published, since the "
                                    "relay http://localhost:"), shown
            assert "refused it (HTTP 421)" in shown and "Nothing was signed for the round" in shown
            assert "What to do: the relay does not know itself by the address this page was given" in shown
            assert "the push is signed for the relay http://localhost:" in shown  # the relay's own reason
            time.sleep(5)  # blocks go by with the tab open: a tab that went on would commit or retry now
        # (the node is read once Playwright's event loop is closed)
        assert query(node, f"/account/{address}")["nonce"] == 2  # its registration and join, nothing after
        assert commitments_of(node, 1, address) == []
