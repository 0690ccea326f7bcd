"""The browser worker's page as the console serves it (`/worker`, behind its access token), in Chromium: it loads
with its node and relay from the address, keeps a key only sealed in the browser's storage, and shows bad input
as a clear message with nothing signed: a key file that is not one, a wrong password, a node that does not answer,
a cheat asked of a page that is not a test's. A browser without the console's session gets neither the page nor
its files, like every page of the console."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from browser_worker_helpers import PASSWORD, chromium, message, skip_without_the_page, worker_tab
from console_helpers import console_thread
from net_helpers import free_port

sync_api = skip_without_the_page(pytest)

STORAGE_ITEM = "trolly-browser-worker-key"  # page_key.js


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    from trolly.console.config import ConsoleConfig

    nobody = f"http://127.0.0.1:{free_port()}"  # no node answers there
    with console_thread(ConsoleConfig(nobody, tmp_path_factory.mktemp("console"))) as site:
        token = site.address.split("token=", 1)[1]
        yield site, f"{site.url}/worker?token={token}&node={nobody}&relay=http://127.0.0.1:1", nobody


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as opened:
        yield opened


def test_the_page_and_its_files_need_the_consoles_session(console):
    site, _, _ = console
    for path in ("/worker", "/worker/", "/worker/page.js", "/worker/kernel.wasm"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{site.url}{path}")
        assert refused.value.code == 403, path


def test_the_page_loads_with_the_node_and_relay_of_its_address(console, browser):
    site, address, nobody = console
    tab = worker_tab(browser, address)
    assert tab.url.startswith(f"{site.url}/worker/?") and "token=" not in tab.url  # the session took the token
    assert tab.input_value("#node-url") == nobody and tab.input_value("#relay-url") == "http://127.0.0.1:1"
    assert tab.get_attribute("body", "data-phase") == "locked"
    tab.problems.check()


def test_a_file_that_is_not_a_key_file_is_refused_and_nothing_is_stored(console, browser, tmp_path):
    _, address, _ = console
    tab = worker_tab(browser, address)
    not_a_key = tmp_path / "notes.txt"
    not_a_key.write_text("these are my notes, not a key\n")
    tab.set_input_files("#import-file", str(not_a_key))
    tab.fill("#import-file-password", "whatever")
    tab.fill("#import-password", PASSWORD)
    tab.click("#import-form button[type=submit]")
    assert "not an armored Trolly key" in message(tab)
    assert tab.evaluate(f"localStorage.getItem({json.dumps(STORAGE_ITEM)})") is None
    tab.problems.check()


def test_a_key_is_kept_sealed_and_a_wrong_password_does_not_open_it(console, browser):
    _, address, nobody = console
    tab = worker_tab(browser, address)
    tab.fill("#create-password", PASSWORD)
    tab.click("#create-form button[type=submit]")
    assert "unreachable" in message(tab)  # kept, but no node answers: said so
    stored = json.loads(tab.evaluate(f"localStorage.getItem({json.dumps(STORAGE_ITEM)})"))
    assert stored["format"] == "trolly-browser-key/1" and "seed" not in json.dumps(stored)
    tab.reload()
    tab.wait_for_selector("#unlock-form:not([hidden])")
    assert tab.inner_text("#stored-address") == stored["address"]
    tab.fill("#unlock-password", "not the password")
    tab.click("#unlock-form button[type=submit]")
    assert "wrong password" in message(tab)
    assert tab.get_attribute("body", "data-phase") == "locked"
    tab.problems.check(expected=(f"^{nobody}.* failed: net::ERR_CONNECTION_REFUSED",))
