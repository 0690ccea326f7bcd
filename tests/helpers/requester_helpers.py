"""A requester's own data files as a user writes them (CSV), for the tests that pack, submit or upload them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trolly.compute.data.docstrings import PACKAGES, docstrings


def write_csv(path, rows, header="a,b,label"):
    """`rows` under `header` as a CSV file at `path`; the path."""
    path.write_text(header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return path


def iris_like(count=40):
    """Two classes of two features, seeded: rows for `write_csv`."""
    generator = np.random.default_rng(0)
    return [(round(float(generator.normal(i % 2 * 3, 1)), 3), round(float(generator.normal(0, 1)), 3),
             ["setosa", "virginica"][i % 2]) for i in range(count)]


PEOPLE_HEADER = "customer_id,spend,city,plan"


def people_table(count=60):
    """A table as people have them, rows for `write_csv` under PEOPLE_HEADER: an id unique per row, an amount at
    its natural scale with one missing cell (row 5), a column of words with one missing cell (row 7), and the
    label (the plan, which the amount tells apart)."""
    generator = np.random.default_rng(3)
    rows = []
    for i in range(count):
        premium = i % 2
        spend = round(float(generator.normal(900 + 1400 * premium, 250)), 2)
        rows.append((f"C{1000 + i}", "" if i == 5 else spend, "" if i == 7 else ["Paris", "Lyon", "Nice"][i % 3],
                     ["basic", "premium"][premium]))
    return rows


def write_flowers_csv(path: Path, count: int = 90) -> list[list[float]]:
    """Three well separated classes of four features; the first row of each class is returned."""
    generator = np.random.default_rng(7)
    centres = {"small": (1.0, 1.0, 1.0, 1.0), "medium": (4.0, 2.0, 4.0, 2.0), "large": (7.0, 4.0, 7.0, 4.0)}
    lines, firsts = ["a,b,c,d,kind"], {}
    for i in range(count):
        name = list(centres)[i % 3]
        row = [round(float(v), 3) for v in generator.normal(centres[name], 0.3)]
        firsts.setdefault(name, row)
        lines.append(",".join(map(str, row)) + f",{name}")
    path.write_text("\n".join(lines) + "\n")
    return [firsts[name] for name in centres]


def write_texts(path, every: int = 12):
    """A requester's JSONL: every `every`-th standard-library docstring, labelled by its package's name."""
    lines = [json.dumps({"text": text, "label": PACKAGES[label]}) for text, label in docstrings()[::every]]
    path.write_text("\n".join(lines) + "\n")
    return path
