"""A requester's own data files as a user writes them (CSV), for the tests that pack, submit or upload them, and
the README's requester walkthrough read back (its commands that write files, its outputs, its numpy snippet), so
that the tests running that walkthrough run the README's own text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_blocks(language: str | None = None) -> list[tuple[str, str]]:
    """The README's fenced blocks in order, as (language, body); only those in `language` when it is given."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", README.read_text(), re.DOTALL)
    return [block for block in blocks if language is None or block[0] == language]


def readme_output_of(command: str) -> str:
    """The README's output block (```text) right after the bash block that runs `command`."""
    blocks = readme_blocks()
    at = next(i for i, (language, body) in enumerate(blocks) if language == "bash" and command in body)
    language, body = blocks[at + 1]
    assert language == "text", f"the README shows no output after {command!r}"
    return body


def readme_fields(output: str) -> dict[str, str]:
    """The `key   value` lines of a README output block, by key."""
    return dict(re.match(r"(\w+) +(.*\S)", line).groups() for line in output.splitlines()
                if re.match(r"\w+ {2,}\S", line))


def readme_table_rows(output: str) -> list[list[str]]:
    """The body rows of a table (rich's `│ a │ b │`) in a README output block, as their cells."""
    return [[cell.strip() for cell in line.strip("│ ").split("│")] for line in output.splitlines()
            if line.startswith("│")]


def write_readme_customers(directory: Path) -> None:
    """The files the README's requester walkthrough writes, made in `directory` by its own text: its `python -c`
    writes customers.csv (run with this interpreter, as `python`), its here-document new-customers.csv."""
    writer = next(body for _, body in readme_blocks("bash") if 'python -c "' in body and "customers.csv" in body)
    code = re.search(r'python -c "\n(.*?)"\n', writer, re.DOTALL).group(1)
    subprocess.run([sys.executable, "-c", code], cwd=directory, check=True, timeout=120)
    rows = next(body for _, body in readme_blocks("bash") if "new-customers.csv <<" in body)
    here_document = re.search(r"^cat > new-customers\.csv <<'END'\n.*?^END\n", rows, re.DOTALL | re.MULTILINE)
    subprocess.run(["bash", "-c", here_document.group(0)], cwd=directory, check=True, timeout=60)


def readme_numpy_snippet() -> tuple[str, list[str]]:
    """The README's snippet that loads the fetched model with numpy and safetensors alone, and the labels its
    comment says it prints."""
    snippet = next(body for _, body in readme_blocks("python") if "customers-model/preprocessing.json" in body)
    promised = re.search(r"argmax\(axis=1\)\]\)\s+# (\[.*\])", snippet).group(1)
    return snippet, json.loads(promised.replace("'", '"'))
