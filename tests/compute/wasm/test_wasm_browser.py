"""The kernel in Chromium (Debian's, driven by Playwright): the committed vector gives its hash from the .wasm
and from the JavaScript fallback, on the page and in a Web Worker, as wasmtime and Node.js give it.

The files are served from the repository by the test itself (a Playwright route on http://localhost, so the
page is a secure context as a console's would be); nothing else is loaded."""

from __future__ import annotations

import json
import mimetypes
import os
import pathlib

import pytest

from wasm_helpers import ROOT, VECTOR

CHROMIUM = pathlib.Path("/usr/bin/chromium")
ORIGIN = "http://localhost:8931"
PAGE = "<!doctype html><title>wasm32 kernel vector</title><p>vector</p>"
SERVED = ("compute/wasm/", "tests/compute/wasm/")
TYPES = {".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}


@pytest.fixture(scope="module")
def page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make setup)")
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not at {CHROMIUM} (make test installs it as root)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox"] if os.geteuid() == 0 else [])
        context = browser.new_context()
        context.route(f"{ORIGIN}/**", serve_from_repository)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{ORIGIN}/")
        yield page
        browser.close()
        assert not errors


def serve_from_repository(route) -> None:
    path = route.request.url.removeprefix(ORIGIN).split("?")[0].lstrip("/")
    if path == "":
        route.fulfill(status=200, content_type="text/html", body=PAGE)
        return
    file = ROOT / path
    if not path.startswith(SERVED) or ".." in path or not file.is_file():
        route.fulfill(status=404, body="not served")
        return
    kind = TYPES.get(file.suffix) or mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    route.fulfill(status=200, content_type=kind, body=file.read_bytes())


@pytest.mark.parametrize("kind", ["wasm", "js"])
def test_chromium_trains_the_vector_to_its_hash_on_the_page(page, kind):
    expected = json.loads(VECTOR.read_text())["expected"]
    result = page.evaluate("""async (kind) => {
        const { runVector } = await import('/tests/compute/wasm/vector.mjs');
        const vector = await (await fetch('/tests/compute/wasm/vectors/digits_segment.json')).json();
        const wasm = await (await fetch('/compute/wasm/kernel.wasm')).arrayBuffer();
        return await runVector(vector, kind, wasm);
    }""", kind)
    assert result["hash"] == expected["hash"]
    assert result["losses"] == expected["losses"]


@pytest.mark.parametrize("kind", ["wasm", "js"])
def test_chromium_trains_the_vector_to_its_hash_in_a_web_worker(page, kind):
    expected = json.loads(VECTOR.read_text())["expected"]
    result = page.evaluate("""async (kind) => {
        const vector = await (await fetch('/tests/compute/wasm/vectors/digits_segment.json')).json();
        const worker = new Worker('/tests/compute/wasm/vector_worker.mjs', { type: 'module' });
        const answer = new Promise((resolve) => { worker.onmessage = ({ data }) => resolve(data); });
        worker.postMessage({ vector, kind, wasmUrl: '/compute/wasm/kernel.wasm' });
        const data = await answer;
        worker.terminate();
        return data;
    }""", kind)
    assert result.get("error") is None
    assert result["hash"] == expected["hash"]
