"""A Prometheus endpoint read as a scraper reads it, shared by the worker's and the verifier's metrics tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample the endpoint serves, by (name, its labels sorted)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape_unlabelled(url: str) -> dict[str, float]:
    """The endpoint's unlabelled samples by name."""
    return {name: value for (name, labels), value in scrape(url).items() if not labels}
