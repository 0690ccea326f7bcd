"""A dev node with something to show, and a console to show it: for the console's HTTP and browser tests.

`busy_node` starts `trolly-node dev`, registers the dev key as a worker, submits a one-worker task and joins it
(so the task runs, with a member and round 0), all through the wallet's own CLI. `file_keyring` writes a
password-protected keyring holding the dev key, as a requester's wallet home holds its keys.

Every console answers only a session its access token opened: `with_console` opens one for its client (unless
told `signed_in=False`), `console_process` yields the address the console printed, and `browser_page(...,
address=...)` opens it first, as a person pastes it into the browser.
"""

from __future__ import annotations

import contextlib
import dataclasses
import asyncio
import concurrent.futures
import http.cookiejar
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner

from dev_node import dev_node, stop_process_group
from net_helpers import free_port
from market_helpers import spec_bytes
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.console.access import ACCESS, Access
from trolly.console.config import ConsoleConfig
from trolly.console.security import CSRF_HEADER
from trolly.console.server import make_app
from trolly.wallet.cli import cli
from trolly.wallet.keyring import WEAKEST_ACCEPTED, Keyring
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.rpc import RpcClient

DEV_ADDRESS = encode_address(dev_key(0).address)
CONSOLE_SCRIPT = pathlib.Path(sys.executable).parent / "trolly-console"
CHROMIUM = pathlib.Path("/usr/bin/chromium")
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
BUILT = pathlib.Path(__file__).resolve().parents[2] / "console" / "web" / "dist" / "app.js"


def skip_without_a_browser():
    """Skip the calling test module unless Playwright, Debian's chromium and the built front end are here; the
    Playwright sync API when they are."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make setup installs it)")
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM} (make test installs it with apt as root)",
                    allow_module_level=True)
    if not BUILT.exists():
        pytest.skip("the console's front end is not built (make setup builds it with npm)", allow_module_level=True)
    return sync_api


def chain_query(node_url: str, path: str):
    """A market or bank query's JSON answer, asked from a thread of its own: Playwright's sync API keeps an
    event loop running in the test's thread, where the wallet's synchronous client cannot start its own."""
    def ask():
        with RpcClient(node_url, timeout=5.0) as client:
            return client.query_json(path)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(ask).result()


ABORTED = "net::ERR_ABORTED"
"""A request the browser dropped: the page left while it was in flight (its event stream, a read), or a
navigation became a download. Not a failure of the page: the console's pages abort nothing themselves."""


class PageProblems:
    """What went wrong in a page as its browser saw it: an error in its console, an uncaught exception, a request
    that failed or was answered with an error status. Every page should load and run with none (issue 33:
    `/favicon.ico` answered 404 on each load); a test that provokes a refusal on purpose names it (`check`'s
    `expected`), and any other fails it.

    A failed load is reported twice, by the network (`URL answered STATUS`, `URL failed: REASON`) and by the
    console ("Failed to load resource"); both are written in the first form, so one pattern names it."""

    LOAD_FAILURE = re.compile(r"^Failed to load resource: (?:the server responded with a status of (\d+)|(net::\S+))")

    def __init__(self, page) -> None:
        self.seen: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.seen.append(f"uncaught: {error}"))
        page.on("requestfailed", self._failed)
        page.on("response", lambda response: response.status >= 400 and self.seen.append(
            f"{response.url} answered {response.status}"))

    def _console(self, message) -> None:
        if message.type != "error":
            return
        url = message.location.get("url", "")
        failure = self.LOAD_FAILURE.match(message.text)
        if failure is None:
            self.seen.append(f"console error: {message.text} ({url})")
        elif failure.group(1):
            self.seen.append(f"{url} answered {failure.group(1)}")
        elif failure.group(2) != ABORTED:
            self.seen.append(f"{url} failed: {failure.group(2)}")

    def _failed(self, request) -> None:
        if request.failure != ABORTED:
            self.seen.append(f"{request.url} failed: {request.failure}")

    def check(self, expected: tuple[str, ...] = ()) -> None:
        """Fail on a problem that none of the `expected` patterns (regular expressions) finds; forget what was
        seen either way."""
        unexpected = sorted({problem for problem in self.seen
                             if not any(re.search(pattern, problem) for pattern in expected)})
        self.seen.clear()
        assert not unexpected, "the page had errors:\n" + "\n".join(unexpected)


PROBLEMS: dict[int, PageProblems] = {}
"""Each open page's problems, by the page's id: `page_problems(page)`."""


def page_problems(page) -> PageProblems:
    return PROBLEMS[id(page)]


@contextlib.contextmanager
def browser_page(sync_api, address: str | None = None, **context_options):
    """A Chromium page (Debian's, by its executable path), 1280x900, signed in to the console at `address` (the
    address with the access token that the console printed) when given; screenshots go to ARTIFACTS. Its
    problems (`PageProblems`) are watched from the start; any not checked by the test fail it at the end."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox"] if os.geteuid() == 0 else [])
        page = browser.new_page(viewport={"width": 1280, "height": 900}, **context_options)
        PROBLEMS[id(page)] = problems = PageProblems(page)
        try:
            if address is not None:
                page.goto(address)
            yield page
            problems.check()
        finally:
            PROBLEMS.pop(id(page), None)
            browser.close()
PASSWORD = "correct horse battery"


def file_keyring(home: pathlib.Path, password: str = PASSWORD, name: str = "dev") -> pathlib.Path:
    """A file keyring in `home` holding the dev key (its argon2id at the weakest cost a keyring may name, so a
    test unlocks it fast; the console opens it as it opens any)."""
    Keyring(home, "file", PasswordSource.fixed(password), WEAKEST_ACCEPTED).recover(name, DEV_MNEMONIC)
    return home


def with_console(node_url: str, check, poll_seconds: float = 0.2, home=None, signed_in: bool = True,
                 access: Access | None = None, fit_baseline=None, **options):
    """Run `await check(client)` against a console app over `node_url` served by aiohttp's test server, signing
    with the keyring in `home` (a fresh empty one when None), its client signed in through the access token
    (as a browser opening the printed address is) unless `signed_in` is False; `fit_baseline`: what fits a
    task's baseline (`make_app`'s)."""

    async def run():
        with tempfile.TemporaryDirectory() as scratch:
            config = ConsoleConfig(node_url, pathlib.Path(home or scratch), **options)
            app = make_app(config, poll_seconds, access, fit_baseline)
            async with TestClient(TestServer(app, host="127.0.0.1")) as client:
                if signed_in:
                    await sign_in(client)
                return await check(client)

    return asyncio.run(run())


def logistic_baseline(dataset) -> dict:
    """A task's baseline as `compute.requester.baseline.fit_baseline` answers it (its contract), fitted here by
    scikit-learn's LogisticRegression on the dataset's training split and scored on its held-out split."""
    from sklearn.linear_model import LogisticRegression

    started = time.perf_counter()
    model = LogisticRegression(max_iter=2000).fit(dataset.train_inputs.numpy(), dataset.train_targets.numpy())
    accuracy = float((model.predict(dataset.test_inputs.numpy()) == dataset.test_targets.numpy()).mean())
    return {"metric": "accuracy", "baseline": accuracy, "baseline_name": "logistic regression (scikit-learn)",
            "seconds": time.perf_counter() - started}


async def sign_in(client: TestClient) -> None:
    """Open a session with the console's access token, as a browser opening the printed address does."""
    opened = await client.get("/", params={"token": access_token(client)}, allow_redirects=False)
    assert opened.status == 303 and opened.headers["Location"] == "/", opened.status


def access_token(client: TestClient) -> str:
    return client.server.app[ACCESS].token


async def csrf_token(client: TestClient) -> str:
    return (await (await client.get("/api/session")).json())["csrf_token"]


def own_origin(client: TestClient) -> str:
    return f"http://127.0.0.1:{client.server.port}"


async def guarded_post(client: TestClient, path: str, body: dict) -> tuple[int, dict]:
    """POST `body` as the console's own page does (its CSRF token, its Origin): (status, JSON answer)."""
    headers = {CSRF_HEADER: await csrf_token(client), "Origin": own_origin(client)}
    response = await client.post(path, json=body, headers=headers)
    return response.status, await response.json()


async def get_json(client: TestClient, path: str) -> tuple[int, dict]:
    response = await client.get(path)
    return response.status, await response.json()


@dataclasses.dataclass(frozen=True)
class BusyNode:
    url: str
    task_id: int
    join_tx: str
    """The hash of the worker's join transaction (for the search by transaction hash)."""


def wallet(home: pathlib.Path, node: str, *args: str, input: str | None = None) -> str:
    env = {"TROLLY_WALLET_HOME": str(home), "TROLLY_KEYRING_BACKEND": "test", "TROLLY_NODE": node,
           "TROLLY_WALLET_PASSWORD": ""}
    result = CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@contextlib.contextmanager
def busy_node(tmp: pathlib.Path) -> Iterator[BusyNode]:
    with dev_node(tmp / "node") as url:
        home = tmp / "wallet"
        wallet(home, url, "keys", "add", "dev", "--recover", "-o", "json", input=DEV_MNEMONIC + "\n")
        wallet(home, url, "worker", "register", "--stake", "10trl", "--blob-url", "http://127.0.0.1:8700", "--samples-per-second", "100",
               "--from", "dev", "--yes", "-o", "json")
        spec = tmp / "spec.json"
        spec.write_bytes(spec_bytes())
        wallet(home, url, "task", "submit", str(spec), "--budget", "50trl", "--workers", "1", "--from", "dev",
               "--yes")
        joined = json.loads(wallet(home, url, "worker", "join", "1", "--from", "dev", "--yes", "-o", "json"))
        yield BusyNode(url, 1, joined["hash"])


@dataclasses.dataclass(frozen=True)
class ConsoleSite:
    url: str
    """http://127.0.0.1:PORT, without a trailing slash."""
    address: str
    """What the console printed: the address to open it at, with its access token."""
    pid: int


@contextlib.contextmanager
def console_process(node_url: str, log: pathlib.Path, timeout: float = 30.0, home: pathlib.Path | None = None,
                    *extra: str, script: tuple[str, ...] = (str(CONSOLE_SCRIPT),),
                    env: dict[str, str] | None = None) -> Iterator[ConsoleSite]:
    """`trolly-console --node NODE --port <free> --home HOME` as a real process (`script`: the command that starts
    it, in `env`); yields its URL and the address it printed."""
    port = free_port()
    home = home or log.parent / "console-home"
    with open(log, "wb") as out:
        process = subprocess.Popen([*script, "--port", str(port), "--node", node_url, "--home", str(home),
                                    *extra], stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + timeout
        while "Trolly console:" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"trolly-console did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        address = log.read_text().split("Trolly console:", 1)[1].split()[0]
        yield ConsoleSite(f"http://127.0.0.1:{port}", address, process.pid)
    finally:
        stop_process_group(process)


@contextlib.contextmanager
def console_thread(config: ConsoleConfig, **app_options) -> Iterator[ConsoleSite]:
    """The console app (`make_app(config, ..., **app_options)`) served on a free port by a thread of this process
    with its own event loop, for a browser test that hands the app a collaborator a real process chooses itself
    (`fit_baseline`); yields its URL and the address with its access token, as `console_process` does."""
    access = Access()
    port = free_port()
    started: concurrent.futures.Future = concurrent.futures.Future()

    async def serve() -> None:
        runner = web.AppRunner(make_app(config, 0.5, access, **app_options))
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
            stop = asyncio.Event()
            started.set_result((asyncio.get_running_loop(), stop))
            await stop.wait()
        finally:
            await runner.cleanup()

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as error:  # a console that did not start: the test fails with why
            if not started.done():
                started.set_exception(error)

    thread = threading.Thread(target=run, name="console", daemon=True)
    thread.start()
    loop, stop = started.result(timeout=30)
    try:
        url = f"http://127.0.0.1:{port}"
        yield ConsoleSite(url, access.address(f"{url}/"), os.getpid())
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    text: str


class SignedIn:
    """A client of a real console (`console_process`) signed in as a browser is: it opened the printed address
    (the access token), keeps the session cookie, and sends the CSRF token and its Origin with a state change."""

    def __init__(self, site: ConsoleSite) -> None:
        self.site = site
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        opened = self.get(site.address)
        assert opened.status == 200, opened
        self.csrf_token = json.loads(self.get("/api/session").text)["csrf_token"]

    def get(self, path: str) -> Answer:
        return self._send(urllib.request.Request(path if path.startswith("http") else self.site.url + path))

    def post(self, path: str, body: dict) -> Answer:
        return self._send(urllib.request.Request(
            self.site.url + path, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Origin": self.site.url, CSRF_HEADER: self.csrf_token}))

    def _send(self, request: urllib.request.Request) -> Answer:
        try:
            with self.opener.open(request, timeout=120) as response:
                return Answer(response.status, response.read().decode(errors="replace"))
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.read().decode(errors="replace"))
