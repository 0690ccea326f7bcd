"""The app process tunes its garbage collector once start-up is done, before it serves (`trolly-node start`, and
`python -m trolly.abci_app.server`, the app alone)."""

from __future__ import annotations

import asyncio
import gc

import pytest
from click.testing import CliRunner

from trolly.abci_app import cli
from trolly.abci_app import server
from trolly.abci_app.gc_tuning import GC_YOUNG_THRESHOLD, tune_garbage_collection


@pytest.fixture
def restored_gc():
    """The test process's collector settings, put back afterwards (the tuning is meant for a node process)."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_tuning_freezes_what_is_alive_and_raises_only_the_young_threshold(restored_gc):
    older = gc.get_threshold()[1:]
    alive_before = [["start-up state"]]
    tune_garbage_collection()
    assert gc.get_freeze_count() > 0 and gc.get_threshold() == (GC_YOUNG_THRESHOLD, *older)
    assert all(tracked is not alive_before[0] for generation in range(3) for tracked in gc.get_objects(generation))


def test_the_app_is_served_with_the_tuned_collector(tmp_path, monkeypatch, restored_gc):
    result = CliRunner().invoke(cli.main, ["init", "--home", str(tmp_path / "h"), "--chain-id", "gc-test"])
    assert result.exit_code == 0, result.output
    seen: list[tuple[int, int]] = []

    async def fake_run_until_signalled(app, address):  # a unit-test stand-in for the server loop
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))

    monkeypatch.setattr(server, "run_until_signalled", fake_run_until_signalled)
    gc.set_threshold(700, *gc.get_threshold()[1:])
    asyncio.run(cli._serve_app(tmp_path / "h", f"unix://{tmp_path}/app.sock", signature_checker=False))
    assert len(seen) == 1 and seen[0][0] == GC_YOUNG_THRESHOLD and seen[0][1] > 0


def test_the_app_alone_is_served_with_the_tuned_collector(tmp_path, monkeypatch, restored_gc):
    seen: list[tuple[int, int]] = []

    async def fake_run_until_signalled(app, address):  # a unit-test stand-in for the server loop
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))

    monkeypatch.setattr(server, "run_until_signalled", fake_run_until_signalled)
    gc.set_threshold(700, *gc.get_threshold()[1:])
    server.main(["--db", str(tmp_path / "app.db"), "--address", f"unix://{tmp_path}/app.sock",
                 "--signature-checker", "off", "--log-level", "WARNING"])
    assert len(seen) == 1 and seen[0][0] == GC_YOUNG_THRESHOLD and seen[0][1] > 0
