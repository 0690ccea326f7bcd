"""A table's columns turned into float32 features, fitted once at pack time on the train split alone.

`fit` reads a table (each column's raw cells as strings) and the train rows' mask and decides per column:

- a column of numbers is standardized: (value - mean) / scale, the mean and scale (population standard
  deviation) of its train cells; a constant column gets scale 1, so it becomes zeros, never a division by 0;
- a column of words is one-hot encoded over the categories seen in the train rows (sorted), so a category seen
  only later (a held-out row, a row to predict) maps to none of them; more than `MAX_CATEGORIES` distinct
  values is refused with the count and what to do;
- a missing cell (empty, NA, N/A, NaN, null; any case) is imputed: a number column's train median, a word
  column's most frequent train word (ties: the first in sorted order); each column counts the cells it filled;
- an id-like column (a value per row, every one distinct: words, or whole numbers that run consecutively or
  sit in a column named like an id) is left out and named, unless the requester keeps it; a column with no
  value in the train rows is left out too.

A table packed for regression (`--task regression`) predicts a number column: its `target` is standardized the
same way, with the train rows' mean and scale (a constant target, a word or a missing cell in it is refused
naming the line: a target is never imputed), the shards hold the standardized values, and `Target.restore`
gives a prediction back in the column's own units.

The fitted `Preprocessing` is a content-addressed blob of the pack (canonical JSON, encrypted like the shards
for private data: its means, medians and categories are facts about the data), and its `transform` is the one
implementation every reader of the pack relies on: the shards hold its output, so workers, verifiers, `task
eval` and the console train and score on the same features, and a later prediction applies it to raw rows.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import DatasetError

MISSING = frozenset({"", "na", "n/a", "nan", "null"})
"""Cells (stripped, lower-cased) that mean "no value"."""
MAX_CATEGORIES = 100
"""The most distinct values a column of words may hold: each becomes a feature."""
MIN_ID_ROWS = 10
"""Rows below which no column is taken for an id (in a tiny table every column is unique per row)."""
_ID_NAME = re.compile(r"(^|[^a-z])id$|^id[^a-z]|_id$|^uuid$|^key$", re.IGNORECASE)
PREPROCESSING_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Column:
    """How one kept column becomes features: `numeric` ((x - mean) / scale, one feature) or `words` (one-hot
    over `categories`); a missing cell becomes `fill` first."""

    name: str
    kind: str
    fill: float | str
    mean: float = 0.0
    scale: float = 1.0
    categories: tuple[str, ...] = ()
    imputed: int = 0
    """Missing cells filled in the packed table (train and held-out rows together)."""
    constant: bool = False
    """A number column with one value in the train rows: it becomes zeros (scale 1), harmless."""

    @property
    def width(self) -> int:
        return 1 if self.kind == "numeric" else len(self.categories)

    def encode(self, cells: Sequence[str], out: np.ndarray, where: str, lines: Sequence[int] | None = None) -> None:
        """This column's features of `cells` written into `out` (rows x width)."""
        if self.kind == "numeric":
            values = _numbers(cells, self.name, where, lines)
            values[np.isnan(values)] = float(self.fill)
            out[:, 0] = (values - self.mean) / self.scale
            return
        index = {category: position for position, category in enumerate(self.categories)}
        out[:] = 0.0
        for row, cell in enumerate(cells):
            word = self.fill if _is_missing(cell) else cell.strip()
            position = index.get(word)
            if position is not None:  # an unseen word maps to none of the categories
                out[row, position] = 1.0

    def report(self) -> dict:
        done = (f"one-hot over {len(self.categories)} categories seen in training" if self.kind == "words"
                else f"constant in training ({self.mean:.6g}): becomes 0" if self.constant
                else f"standardized (mean {self.mean:.6g}, scale {self.scale:.6g})")
        fill = f"median {self.fill:.6g}" if self.kind == "numeric" else f"most frequent {self.fill!r}"
        return {"column": self.name, "kind": self.kind, "done": done, "features": self.width,
                "imputed": self.imputed, "imputed_with": fill}


@dataclasses.dataclass(frozen=True)
class Target:
    """The number column a regression table predicts, standardized like a feature: the model is trained on
    (value - mean) / scale, the train rows' mean and population standard deviation."""

    column: str
    mean: float
    scale: float
    kind: str = "regression"

    def standardize(self, values: np.ndarray) -> np.ndarray:
        return ((np.asarray(values, dtype=np.float64) - self.mean) / self.scale).astype(np.float32)

    def restore(self, standardized: np.ndarray) -> np.ndarray:
        """Standardized values (the model's outputs) back in the column's own units, as float64."""
        return np.asarray(standardized, dtype=np.float64) * self.scale + self.mean


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """The fitted preprocessing of a table: its kept columns in order (their features side by side) and the
    columns left out, each with why; for a regression table, its standardized `target`."""

    columns: tuple[Column, ...]
    dropped: tuple[tuple[str, str], ...]
    label_column: str
    target: Target | None = None

    @property
    def width(self) -> int:
        return sum(column.width for column in self.columns)

    def transform(self, table: Mapping[str, Sequence[str]], where: str = "rows",
                  lines: Sequence[int] | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The float32 features (rows x `width`) of `table`'s raw cells, by column name; a missing column is
        refused, extra ones are ignored."""
        absent = [column.name for column in self.columns if column.name not in table]
        if absent:
            raise DatasetError(f"{where} lacks the column(s) {', '.join(map(repr, absent))} the model reads")
        rows = len(table[self.columns[0].name]) if self.columns else 0
        out = np.empty((rows, self.width), dtype=np.float32) if out is None else out
        start = 0
        for column in self.columns:
            column.encode(table[column.name], out[:, start:start + column.width], where, lines)
            start += column.width
        return out

    def report(self) -> list[dict]:
        """What was done per column, kept and left out, for `data pack`'s summary."""
        kept = [column.report() for column in self.columns]
        return kept + [{"column": name, "kind": "left out", "done": reason, "features": 0, "imputed": 0}
                       for name, reason in self.dropped]

    def to_bytes(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces), versioned; a classification table's has no `target` entry."""
        body = {"version": PREPROCESSING_VERSION, "label_column": self.label_column,
                "columns": [dataclasses.asdict(column) for column in self.columns],
                "dropped": [list(pair) for pair in self.dropped]}
        if self.target is not None:
            body["target"] = dataclasses.asdict(self.target)
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Preprocessing:
        try:
            body = json.loads(data)
            if body["version"] != PREPROCESSING_VERSION:
                raise ValueError(f"version {body['version']!r}")
            columns = tuple(Column(**{**entry, "categories": tuple(entry["categories"])}) for entry in body["columns"])
            target = None if "target" not in body else Target(**body["target"])
            if target is not None and (target.kind != "regression" or not target.scale > 0):
                raise ValueError(f"target {body['target']!r}")
            return cls(columns, tuple((str(name), str(reason)) for name, reason in body["dropped"]),
                       str(body["label_column"]), target)
        except (ValueError, KeyError, TypeError) as error:
            raise DatasetError(f"the pack's preprocessing does not decode ({error}): pack the data again") from None


def fit(table: Mapping[str, Sequence[str]], train: np.ndarray, label_column: str, keep: Sequence[str] = (),
        where: str = "the table", lines: Sequence[int] | None = None) -> Preprocessing:
    """The preprocessing of `table`'s columns (the label column already taken out), its statistics from the
    rows where `train` is true; `keep` names columns kept even if they look like ids."""
    unknown = [name for name in keep if name not in table]
    if unknown:
        raise DatasetError(f"--keep-columns names {', '.join(map(repr, unknown))}, not a feature column of {where}; "
                           f"its columns: {', '.join(table)}")
    columns, dropped = [], []
    for name, cells in table.items():
        column = _fit_column(name, cells, train, where, lines)
        if column is None:
            dropped.append((name, "no value in the training rows"))
        elif name not in keep and len(cells) >= MIN_ID_ROWS and _id_like(name, cells, column.kind):
            dropped.append((name, "unique per row, like an id (--keep-columns keeps it)"))
        elif column.kind == "words" and len(set(cell.strip() for cell in cells)) > MAX_CATEGORIES:
            distinct = len(set(cell.strip() for cell in cells))
            raise DatasetError(f"{where}: column {name!r} holds {distinct} distinct words, more than the "
                               f"{MAX_CATEGORIES} a column of words may have (each becomes a feature): leave the "
                               f"column out, or group its rare values (e.g. as 'other')")
        else:
            columns.append(column)
    if not columns:
        left = ", ".join(f"{name!r} ({reason})" for name, reason in dropped)
        raise DatasetError(f"{where} has no feature column left: {left}; keep one with --keep-columns")
    return Preprocessing(tuple(columns), tuple(dropped), label_column)


def target_values(cells: Sequence[str], column: str, where: str = "the table",
                  lines: Sequence[int] | None = None) -> np.ndarray:
    """The float64 values of a regression table's target column; a missing cell (never imputed: the model would
    learn the filler), a word or a value that is not finite is refused naming its line."""
    values = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        if _is_missing(cell):
            raise DatasetError(f"{_at(where, lines, row)} has no value in the target column {column!r} "
                               f"({cell.strip()!r}): a target is never imputed; fill it or remove the row")
        try:
            value = float(cell)
        except ValueError:
            raise DatasetError(f"{_at(where, lines, row)}, column {column!r}: {cell.strip()!r} is not a number: "
                               f"--task regression predicts a column of numbers (pack without it to classify "
                               f"the column's values)") from None
        if not math.isfinite(value):
            raise DatasetError(f"{_at(where, lines, row)}, column {column!r}: {cell.strip()!r} is not a finite number")
        values[row] = value
    return values


def fit_target(values: np.ndarray, train: np.ndarray, column: str, where: str = "the table") -> Target:
    """The standardization of a regression target from the rows where `train` is true; a target constant over
    them is refused (there is nothing to learn, and no scale to divide by)."""
    chosen = values[train]
    mean, scale = float(chosen.mean()), float(chosen.std())
    if not scale > 0 or not math.isfinite(scale):
        raise DatasetError(f"{where}: the target column {column!r} is constant over the training rows (every value "
                           f"{chosen[0]:.6g}): there is nothing to predict; name another column with --label-column")
    return Target(column, mean, scale)


def _fit_column(name: str, cells: Sequence[str], train: np.ndarray, where: str,
                lines: Sequence[int] | None) -> Column | None:
    missing = np.array([_is_missing(cell) for cell in cells], dtype=bool)
    present = ~missing & train
    if not present.any():
        return None
    imputed = int(missing.sum())
    if _numeric(name, cells, missing, where, lines):
        values = _numbers(cells, name, where, lines)[present]
        mean, deviation = float(values.mean()), float(values.std())
        scale = deviation if deviation > 0 and math.isfinite(deviation) else 1.0
        return Column(name, "numeric", float(np.median(values)), mean, scale, (), imputed, not deviation > 0)
    words = [cell.strip() for cell, use in zip(cells, present) if use]
    categories, counts = np.unique(np.array(words, dtype=object), return_counts=True)
    fill = str(categories[int(np.argmax(counts))])  # argmax takes the first of ties, in sorted order
    return Column(name, "words", fill, 0.0, 1.0, tuple(str(category) for category in categories), imputed)


def _numeric(name: str, cells: Sequence[str], missing: np.ndarray, where: str, lines: Sequence[int] | None) -> bool:
    """Whether a column is numbers: every present cell one. A column mostly of numbers with a word in it is a
    refusal naming the cell (a typo, not a column of words)."""
    words = [row for row, cell in enumerate(cells) if not missing[row] and not _is_float(cell)]
    if not words:
        return True
    present = int((~missing).sum())
    if 2 * len(words) > present:
        return False
    row = words[0]
    raise DatasetError(f"{_at(where, lines, row)}, column {name!r}: {cells[row]!r} is not a number, while most of the "
                       f"column is numbers: fix the cell, or leave it empty to have it imputed")


def _numbers(cells: Sequence[str], name: str, where: str, lines: Sequence[int] | None) -> np.ndarray:
    """float64 values of a number column's cells, NaN where missing; a cell not a finite number is refused."""
    values = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        if _is_missing(cell):
            values[row] = np.nan
            continue
        try:
            value = float(cell)
        except ValueError:
            raise DatasetError(f"{_at(where, lines, row)}, column {name!r}: {cell!r} is not a number") from None
        if not math.isfinite(value):
            raise DatasetError(f"{_at(where, lines, row)}, column {name!r}: {cell!r} is not a finite number")
        values[row] = value
    return values


def _id_like(name: str, cells: Sequence[str], kind: str) -> bool:
    """A value per row, all distinct: a column of words, or of whole numbers running consecutively (a row
    number) or named like an id (`id`, `user_id`, ...)."""
    stripped = [cell.strip() for cell in cells]
    if any(_is_missing(cell) for cell in stripped) or len(set(stripped)) != len(stripped):
        return False
    if kind == "words":
        return True
    values = np.array([float(cell) for cell in stripped])
    if not np.all(values == np.round(values)):
        return False
    return bool(_ID_NAME.search(name.strip())) or float(values.max() - values.min()) == len(values) - 1


def _at(where: str, lines: Sequence[int] | None, row: int) -> str:
    return f"{where} line {lines[row]}" if lines is not None else f"{where} row {row + 1}"


def _is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING


def _is_float(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
