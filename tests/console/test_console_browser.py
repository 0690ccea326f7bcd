"""The console in a real browser: Playwright drives Debian's Chromium (launched by its executable path) through
the network page, the tasks, a task's page, a search, keyboard use, and the node going down. Screenshots go to
`test-artifacts/console/`."""

from __future__ import annotations

import contextlib

import pytest

from console_helpers import (ARTIFACTS, DEV_ADDRESS, browser_page, busy_node, console_process, page_problems,
                             skip_without_a_browser)

pytestmark = pytest.mark.slow

SYNC_API = skip_without_a_browser()
expect = SYNC_API.expect


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-browser")
    with contextlib.ExitStack() as console, contextlib.ExitStack() as node_running:
        node = node_running.enter_context(busy_node(tmp))
        served = console.enter_context(console_process(node.url, tmp / "console.log"))
        yield node, served, node_running  # the last test stops the node while the console goes on


@pytest.fixture(scope="module")
def page(site):
    with browser_page(SYNC_API, site[1].address) as page:  # opened through the address the console printed
        yield page


@pytest.fixture(autouse=True)
def no_page_errors(page):
    """Each test's pages load and run with no error in the browser's console and no failed request."""
    yield
    page_problems(page).check()


def loaded(page, hash_: str) -> None:
    page.wait_for_selector(f'main[data-loaded="{hash_}"]', timeout=15_000)


def test_the_network_page_shows_the_chain_and_follows_it_live(site, page):
    node, served, _ = site
    url = served.url
    page.goto(f"{url}/#/network")
    loaded(page, "#/network")
    expect(page.get_by_role("table", name="Validators").get_by_text("validator-0")).to_be_visible()
    expect(page.get_by_role("table", name="Validators").get_by_text("proved at height")).to_be_visible()
    status = page.locator("#node-status")
    first = status.inner_text()
    assert first.startswith("Node up: height")
    page.wait_for_function("first => document.getElementById('node-status').innerText !== first", arg=first,
                           timeout=10_000)  # a new block arrived through the event stream, without a reload
    assert page.locator("#tx-chart canvas").count() == 1
    page.screenshot(path=str(ARTIFACTS / "network.png"), full_page=True)


def test_the_tasks_list_leads_to_a_task_page_with_its_members_and_rounds(site, page):
    node, served, _ = site
    url = served.url
    page.goto(f"{url}/#/tasks")
    loaded(page, "#/tasks")
    page.get_by_role("link", name=f"Task {node.task_id}").click()
    loaded(page, f"#/tasks/{node.task_id}")
    expect(page.get_by_role("heading", name=f"Task {node.task_id}", exact=True)).to_be_visible()
    expect(page.get_by_role("table", name="Members").get_by_text(DEV_ADDRESS)).to_be_visible()
    expect(page.get_by_role("heading", name="Round 0")).to_be_visible()
    expect(page.get_by_text("proved at height").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "task.png"), full_page=True)


def test_search_by_keyboard_finds_an_address_and_a_transaction(site, page):
    node, served, _ = site
    url = served.url
    page.goto(f"{url}/#/network")
    loaded(page, "#/network")
    page.keyboard.press("Tab")  # the skip link, then the page links, then the search box
    page.get_by_label("Search by transaction hash, address or task id").focus()
    page.keyboard.type(DEV_ADDRESS)
    page.keyboard.press("Enter")
    page.wait_for_selector("main h2:text('Account')", timeout=15_000)
    expect(page.get_by_text("registered, stake 10 TRL")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "search-address.png"), full_page=True)
    page.get_by_label("Search by transaction hash, address or task id").fill(node.join_tx)
    page.get_by_role("button", name="Search").click()
    page.wait_for_selector("main h2:text('Transaction')", timeout=15_000)
    expect(page.get_by_text("JoinTask").first).to_be_visible()


def test_a_node_that_goes_down_shows_as_down_with_the_last_height_seen(site, page):
    node, served, node_running = site
    url = served.url
    page.goto(f"{url}/#/network")
    loaded(page, "#/network")
    node_running.close()
    status = page.locator("#node-status")
    page.wait_for_function("document.getElementById('node-status').dataset.up === 'no'", timeout=15_000)
    assert "Node DOWN: last height seen" in status.inner_text()
    page.reload()
    loaded(page, "error")
    alert = page.get_by_role("alert").inner_text()
    assert "The node is down; the last height seen was" in alert
    page_problems(page).check(expected=(r"/api/network answered 503$",))  # the page's read, told the node is down
    page.screenshot(path=str(ARTIFACTS / "node-down.png"), full_page=True)
