"""Browser worker pages for the tests: Chromium tabs on the console's `/worker` page (each tab its own browser
context, so each keeps its own key in its own storage, as two people's browsers do), and the steps a person takes
on the page, by its labels and buttons.

    with chromium(sync_api) as browser:
        tab = worker_tab(browser, worker_page_address)      # the console's /worker?token=...&node=...&relay=...
        address = create_key(tab)                           # the address the page shows
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
from types import SimpleNamespace

from console_helpers import CHROMIUM, PageProblems

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILT_PAGE = ROOT / "console" / "web" / "dist" / "worker" / "worker.html"
PASSWORD = "tab password 1"
WAIT_MS = 60_000


def skip_without_the_page(pytest):
    """The Playwright sync API when Playwright, Debian's chromium and the built page are here; else skip."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make setup installs it)")
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM}", allow_module_level=True)
    if not BUILT_PAGE.exists():
        pytest.skip("the browser worker's page is not built (make setup builds it with npm)", allow_module_level=True)
    return sync_api


@contextlib.contextmanager
def chromium(sync_api):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            yield browser
        finally:
            browser.close()


def worker_tab(browser, address: str):
    """A new tab in a context of its own on `address`, its problems watched (`tab.problems`)."""
    context = browser.new_context(viewport={"width": 1100, "height": 1000})
    tab = context.new_page()
    tab.problems = PageProblems(tab)
    tab.goto(address)
    tab.wait_for_selector("body[data-phase]")
    return tab


def message(tab, timeout: float = WAIT_MS) -> str:
    """The page's message once it shows one."""
    tab.wait_for_selector("#message:not([hidden])", timeout=timeout)
    return tab.inner_text("#message")


def create_key(tab, password: str = PASSWORD) -> str:
    """Create a key on the page; the address the page shows once connected to the node."""
    tab.fill("#create-password", password)
    tab.click("#create-form button[type=submit]")
    tab.wait_for_selector("body[data-phase=ready]", timeout=WAIT_MS)
    # the phase is set before the account is read: wait for the address itself
    tab.wait_for_function("document.querySelector('#address').textContent.startsWith('trolly1')", timeout=WAIT_MS)
    return tab.inner_text("#address")


@contextlib.contextmanager
def serving_blobs(store):
    """`store` served by a blob service (reads answer CORS, as a tab needs) on a thread of its own; yields its URL."""
    import asyncio
    import concurrent.futures
    import threading

    from trolly.compute.blobs import BlobServer

    started: concurrent.futures.Future = concurrent.futures.Future()

    async def serve() -> None:
        async with BlobServer(store) as server:
            stop = asyncio.Event()
            started.set_result((asyncio.get_running_loop(), stop, server.url))
            await stop.wait()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="blobs", daemon=True)
    thread.start()
    loop, stop, url = started.result(timeout=30)
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)


def register(tab) -> str:
    """Register the tab's key with its relay; the registration the page then shows."""
    tab.click("#register")
    tab.wait_for_function("document.querySelector('#registration').textContent.startsWith('yes')", timeout=WAIT_MS)
    return tab.inner_text("#registration")


def join(tab, task_id: int) -> None:
    """Refresh the task list and press the task's Join button (the page then trains it until it is done)."""
    tab.click("#refresh-tasks")
    tab.wait_for_selector(f'tr[data-task="{task_id}"] button', timeout=WAIT_MS)
    tab.click(f'tr[data-task="{task_id}"] button')
    tab.wait_for_selector("body[data-phase=working]", timeout=WAIT_MS)


@contextlib.contextmanager
def browser_localnet(tmp_path: pathlib.Path, workers: int):
    """A solo localnet with `workers` native workers, taken down after: its home, exported environment, node URL,
    the requester's wallet (`localnet_helpers.wallet_in`) and the browser worker page's address it printed."""
    from localnet_helpers import exported_env, free_base_port, localnet, wallet_in

    home = tmp_path / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--workers", str(workers), "--slow-workers", "0", "--home",
                  str(home), "--base-port", str(free_base_port(workers=workers)), timeout=180.0)
    try:
        env = exported_env(up)
        yield SimpleNamespace(home=home, env=env, node=env["TROLLY_NODE"], wallet=wallet_in(env, tmp_path),
                              page=re.search(r"browser worker: (\S+)", up.stdout + up.stderr).group(1))
    finally:
        localnet("down", "--home", str(home), timeout=120.0, check=False)
