"""The Grafana dashboard (docs/grafana/trolly.json) loads and plots only metrics the processes expose, and
docs/operations.md lists every metric they expose. The exposed names are read from the registries themselves,
built in this process: the app's, the solo engine's, the worker's and the verifier's."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from trolly.abci_app.engine.metrics import EngineMetrics
from trolly.abci_app.metrics import AppMetrics
from trolly.compute.worker.metrics import WorkerMetrics
from trolly.verifier.metrics import VerifierMetrics

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "trolly.json"
OPERATIONS = ROOT / "docs" / "operations.md"
METRIC_NAME = re.compile(r"\b(?:trolly|cometbft)_[a-zA-Z0-9_]+")


def registries():
    return [AppMetrics().registry, EngineMetrics("trolly-test").registry, WorkerMetrics().registry,
            VerifierMetrics().registry]


def exposed_families() -> dict[str, str]:
    """Each metric family as documented (a counter with its `_total`) -> its type."""
    families = {}
    for registry in registries():
        for family in registry.collect():
            families[family.name + ("_total" if family.type == "counter" else "")] = family.type
    return families


def exposed_series() -> set[str]:
    """Every series name a scrape can show (`_total`, `_bucket`, `_sum`, `_count`, `_created` included)."""
    names = set()
    for registry in registries():
        for family in registry.collect():
            names.add(family.name)
            names.update(f"{family.name}{suffix}" for suffix in ("_total", "_created", "_bucket", "_sum", "_count"))
    return names


def plotted() -> list[tuple[str, str]]:
    """(panel title, metric name) for every metric a panel's query names."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["panels"]
    found = []
    for panel in dashboard["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} plots nothing"
        for target in panel["targets"]:
            names = METRIC_NAME.findall(target["expr"])
            assert names, f"panel {panel['title']!r} has a query naming no Trolly or CometBFT metric"
            found += [(panel["title"], name) for name in names]
    return found


def test_the_dashboard_is_grafana_json_whose_panels_do_not_overlap():
    dashboard = json.loads(DASHBOARD.read_text())
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        covered = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not covered & cells, f"panel {panel['title']!r} overlaps another"
        cells |= covered
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


@pytest.mark.parametrize("title, name", plotted())
def test_every_metric_the_dashboard_plots_is_exposed(title, name):
    assert name in exposed_series(), f"panel {title!r} plots {name}, which no Trolly process serves"


def test_every_metric_exposed_is_listed_in_operations_md_and_each_of_trollys_own_is_plotted():
    documented = OPERATIONS.read_text()
    plotted_names = {name for _, name in plotted()}
    for name, kind in exposed_families().items():
        assert f"`{name}`" in documented, f"docs/operations.md does not list {name}"
        series = {name} | {name + suffix for suffix in ("_bucket", "_sum", "_count")}
        if name.startswith("trolly_"):  # the engine's stand-ins for CometBFT's need no panel each
            assert series & plotted_names, f"the dashboard plots nothing of {name} ({kind})"
