"""A table packed to predict a number (`trolly-wallet data pack --task regression`), and the hint to do so.

The label column of a regression pack is a column of numbers: every cell one (a word, a missing cell or a value
that is not finite is refused naming its line: a target is never imputed), standardized with the train rows'
mean and scale (`preprocessing.Target`; a target constant over them is refused). The held-out split is drawn
over all rows, as one group (there are no classes to stratify by), and the shards hold the standardized target
as float32, which the model's one output is trained to match with mean squared error (`compute.training`).

Packed as classes (the default), a label column that looks like a quantity (more than `NUMERIC_LABELS_HINT`
distinct numbers, or numbers that are not whole) gets a hint to pack it as regression instead, and is refused as
classes beyond `MAX_NUMERIC_CLASSES` distinct values, with the same hint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DatasetError
from .preprocessing import Target, fit_target, target_values

NUMERIC_LABELS_HINT = 20
"""Distinct labels, all numbers, beyond which a classification pack suggests `--task regression` (as do labels
that are not whole numbers): so many look like a quantity rather than classes."""
MAX_NUMERIC_CLASSES = 100
"""Distinct labels, all numbers, beyond which packing them as classes is refused with that hint."""
REGRESSION_ADVICE = "to predict the number rather than pick among its values as classes, pack with --task regression"
MIN_REGRESSION_ROWS = 2
"""Rows a regression table needs: one to train on, one held out."""


def regression_hint(names: Sequence[str]) -> str:
    """A hint to pack as regression when the label names are all numbers, more than `NUMERIC_LABELS_HINT` of
    them or not all whole; "" otherwise."""
    try:
        values = np.array([float(name) for name in set(names)], dtype=np.float64)
    except ValueError:
        return ""
    if not len(values) or not np.all(np.isfinite(values)):
        return ""
    if len(values) <= NUMERIC_LABELS_HINT and np.all(values == np.round(values)):
        return ""
    return f"the label column holds numbers ({len(values)} distinct values): {REGRESSION_ADVICE}"


def standardized_targets(labels: Sequence[str], train: np.ndarray, column: str, where: str,
                         lines: Sequence[int] | None) -> tuple[Target, np.ndarray]:
    """The target column's standardization, fitted on the `train` rows, and every row's standardized value
    (float32)."""
    values = target_values(labels, column, where, lines)
    target = fit_target(values, train, column, where)
    return target, target.standardize(values)


def check_rows(count: int, where: str) -> None:
    """Refuse a regression table too small to hold out a row and still train on one."""
    if count < MIN_REGRESSION_ROWS:
        raise DatasetError(f"{where} has {count} row(s): regression needs at least {MIN_REGRESSION_ROWS}, one to "
                           f"train on and one held out")
