"""The console starts light (issue 33): `trolly-console` loads no torch when it starts, nor to serve its page and
the reads that compute nothing (the network, the tasks, the wallet, the Provide compute page, governance), nor
for the preflight, which runs as `trolly-worker preflight` in a pinned child. torch loads only where a page first
uses it, in a process its entry point pinned (`console/entry.py`; the pin itself is checked with every entry
point's in `test_instruction_set_pin.py`).

Whether the real process loaded torch is read from outside, in its memory map: a process that imported torch
has mapped torch's shared library."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from console_helpers import SignedIn, busy_node, console_process, file_keyring
from trolly.compute.instruction_sets import PINNED_VARIABLES

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENTRY = (sys.executable, "-c", "import sys; from trolly.console.entry import main; sys.argv[0] = 'trolly-console'; "
                               "main()")
"""`trolly-console` as the package declares it (`console.entry:main`), in this interpreter."""


def loaded_torch(pid: int) -> bool:
    return "libtorch" in pathlib.Path(f"/proc/{pid}/maps").read_text()


def test_no_console_module_loads_torch_when_imported():
    """Every module of the console, imported in a fresh process: none of them brings torch in."""
    modules = sorted(f"trolly.console.{path.stem}" for path in (ROOT / "console").glob("*.py")
                     if path.stem != "__init__")
    probe = ("import importlib, json, sys\n"
             f"for name in {modules!r}:\n"
             "    importlib.import_module(name)\n"
             "print(json.dumps(sorted(n for n in ('torch', 'transformers', 'peft') if n in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "trolly.console.server" in modules and json.loads(result.stdout) == []


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with busy_node(tmp_path_factory.mktemp("console-light")) as busy:
        yield busy


def test_a_started_console_serves_its_pages_and_reads_and_runs_the_preflight_without_torch(node, tmp_path):
    """The real console, started as a user starts it (no instruction set chosen in its environment): its page,
    bundle and icon, every read the pages make that computes nothing, and the preflight (in a child, whose
    answer it shows and saves) leave it without torch."""
    environment = {name: value for name, value in os.environ.items() if name not in PINNED_VARIABLES}
    home = file_keyring(tmp_path / "home")
    with console_process(node.url, tmp_path / "console.log", 60.0, home, script=ENTRY, env=environment) as site:
        assert not loaded_torch(site.pid)
        browser = SignedIn(site)
        page = browser.get("/")
        assert page.status == 200 and '<script type="module" src="/assets/app.js">' in page.text
        for path in ("/assets/app.js", "/assets/app.css", "/favicon.ico", "/api/session", "/api/node",
                     "/api/network", "/api/tasks", f"/api/tasks/{node.task_id}", f"/api/search?q={node.task_id}",
                     f"/api/tasks/{node.task_id}/chart", "/api/new-task/templates", "/api/wallet", "/api/compute",
                     "/api/gov"):
            answer = browser.get(path)
            assert answer.status == 200, (path, answer.status, answer.text[:300])
        assert not loaded_torch(site.pid)
        measured = browser.post("/api/compute/preflight", {})
        assert measured.status == 200, measured.text
        assert json.loads(measured.text)["preflight"]["samples_per_second"] > 0
        shown = json.loads(browser.get("/api/compute").text)["preflight"]
        assert any(line.startswith("reference speed") for line in shown)
        assert not loaded_torch(site.pid)
