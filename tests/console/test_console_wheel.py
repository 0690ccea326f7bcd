"""The console's front end is package data (issue 33): a wheel built from this checkout, installed in a fresh
virtual environment, gives a `trolly-console` that serves its page, bundle and icon from the installed package,
not from a source tree (before, `pip install .` gave a console that answered 503).

The fresh environment reaches the project's dependencies without downloading them, through a `.pth` line naming
this interpreter's site-packages (a path line only: the `.pth` files there, the project's own editable finder
among them, are not run), and the test checks that the console it runs is the installed copy."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import venv

import pytest

from console_helpers import BUILT, SignedIn, console_process

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("chain", "abci_app", "compute", "verifier", "wallet", "localnet", "console")
NO_NODE = "http://127.0.0.1:9"

pytestmark = pytest.mark.slow


def run(*command: str, env: dict[str, str] | None = None, cwd: pathlib.Path | None = None) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def source_copy(destination: pathlib.Path) -> pathlib.Path:
    """What a wheel is built from (the packages, setup.py, pyproject.toml, the README), copied, so that the build's
    own folders land there and not in the checkout; the front end's npm packages stay behind."""
    destination.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, destination / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    return destination


def fresh_environment(directory: pathlib.Path) -> pathlib.Path:
    """A virtual environment with no project installed, whose path ends with this interpreter's site-packages."""
    venv.EnvBuilder(with_pip=False).create(directory)
    python = directory / "bin" / "python"
    site_packages = pathlib.Path(run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                                     env=clean_environment()).strip())
    (site_packages / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return directory


def clean_environment() -> dict[str, str]:
    """This environment without the path that makes `trolly` this checkout (the tests' import shim)."""
    return {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.skipif(not BUILT.exists(), reason="the console's front end is not built (make setup builds it with npm)")
def test_a_console_installed_from_a_wheel_serves_its_page_from_the_package(tmp_path):
    source = source_copy(tmp_path / "source")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w",
        str(tmp_path / "wheels"), str(source), env=clean_environment())
    (wheel,) = (tmp_path / "wheels").glob("trolly-*.whl")
    environment = fresh_environment(tmp_path / "venv")
    run(sys.executable, "-m", "pip", "--python", str(environment / "bin" / "python"), "install", "--no-deps",
        "--quiet", str(wheel), env=clean_environment())
    shutil.rmtree(source)  # nothing of a source tree is left to serve from

    where = json.loads(run(str(environment / "bin" / "python"), "-c",
                           "import json, trolly.console.server as server; "
                           "print(json.dumps([server.__file__, str(server.WEB)]))",
                           env=clean_environment()))
    installed = str(environment / "lib")
    assert where[0].startswith(installed) and where[1].startswith(installed)

    script = (str(environment / "bin" / "trolly-console"),)
    with console_process(NO_NODE, tmp_path / "console.log", 60.0, tmp_path / "home", script=script,
                         env=clean_environment()) as site:
        browser = SignedIn(site)
        page = browser.get("/")
        bundle = browser.get("/assets/app.js")
        icon = browser.get("/favicon.ico")
    assert page.status == 200 and "<title>Trolly console</title>" in page.text
    assert '<script type="module" src="/assets/app.js">' in page.text
    assert bundle.status == 200 and bundle.text == BUILT.read_text()
    assert icon.status == 200 and icon.text.startswith("<svg")
