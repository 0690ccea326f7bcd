"""A fetched model answering raw rows of a table (`trolly-wallet model predict DIR rows.csv`).

`load_fetched` reads what `task fetch` wrote into DIR: the spec (the model's architecture and shape), the
weights (`model.safetensors`, loaded into that model), the label names and `preprocessing.json`, the
preprocessing the pack fitted on the train split (`compute/data/preprocessing.py`). `predict` reads a CSV of raw
rows, makes their features with that preprocessing's `transform` (the one implementation the workers' shards
were made with: words one-hot over the categories seen in training, an unseen word none of them, a missing cell
imputed), runs the model's forward pass and turns each row's outputs into an answer (`answers`).

The rows' columns are the packed table's: every column the model reads must be there; the label column and the
columns the pack left out (an id) may be there and are ignored; any other column is refused, named, as are a
missing column, a ragged row, a file that is not UTF-8 or is empty, and a cell that is not a number in a column
of numbers: the refusal names the line, and nothing is answered.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import torch

from ..data.packing import PREPROCESSING_FILE
from ..data.preprocessing import Preprocessing
from ..data.readers import _csv_rows, _read_text
from ..errors import ComputeError, DatasetError
from ..models import build_model
from ..spec import parse_spec
from .results import LABELS_FILE, MODEL_FILE, SPEC_FILE, ResultError, spec_shape


@dataclasses.dataclass(frozen=True)
class FetchedModel:
    """A model `task fetch` wrote, ready to answer raw rows."""

    model: torch.nn.Module
    labels: tuple[str, ...]
    preprocessing: Preprocessing


def load_fetched(directory: pathlib.Path) -> FetchedModel:
    """The model in `directory` as `task fetch` wrote it, with its preprocessing; refused when a file is missing
    or the files do not fit one another."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = pathlib.Path(directory)
    if not (directory / PREPROCESSING_FILE).exists():
        raise ResultError(f"{directory} has no {PREPROCESSING_FILE}: `model predict` answers rows of the table a "
                          f"task trained on, made into features by its preprocessing; fetch the task into a new "
                          f"directory with `trolly-wallet task fetch` (with --data for private data)")
    try:
        spec = parse_spec((directory / SPEC_FILE).read_bytes())
        labels = json.loads((directory / LABELS_FILE).read_text())
        preprocessing = Preprocessing.from_bytes((directory / PREPROCESSING_FILE).read_bytes())
        shape = spec_shape(spec)
        model = build_model(spec.model.arch, spec.model.config, shape, spec.training.seed)
        model.load_state_dict(load_file(directory / MODEL_FILE))
    except (OSError, ValueError, SafetensorError, RuntimeError, ComputeError) as error:
        raise ResultError(f"{directory} is not a model as `task fetch` writes it: {error}") from None
    if preprocessing.width != shape.input_size:
        raise ResultError(f"{directory}: {PREPROCESSING_FILE} makes {preprocessing.width} features, the model reads "
                          f"{shape.input_size}: fetch the task again")
    names = tuple(str(label) for label in labels) if labels else tuple(map(str, range(shape.num_classes)))
    return FetchedModel(model.eval(), names, preprocessing)


def read_rows(path: pathlib.Path, preprocessing: Preprocessing) -> tuple[dict[str, list[str]], list[int]]:
    """The raw cells of the columns the model reads, by column, and each row's line in `path`."""
    text = _read_text(pathlib.Path(path))
    rows = _csv_rows(path, text)
    _, first = next(rows)
    header = [name.strip() for name in first]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise DatasetError(f"{path}: the header names column(s) {', '.join(map(repr, repeated))} more than once")
    _check_columns(path, header, preprocessing)
    reads = {column.name: header.index(column.name) for column in preprocessing.columns}
    table: dict[str, list[str]] = {name: [] for name in reads}
    lines = []
    for number, row in rows:
        if len(row) != len(header):
            raise DatasetError(f"{path} line {number} has {len(row)} cells, the header has {len(header)}: give every "
                               f"row one cell per column (quote a cell that holds a comma)")
        lines.append(number)
        for name, index in reads.items():
            table[name].append(row[index])
    if not lines:
        raise DatasetError(f"{path} has a header but no rows to answer")
    return table, lines


def _check_columns(path: pathlib.Path, header: list[str], preprocessing: Preprocessing) -> None:
    """Refuse a header lacking a column the model reads, or naming one the packed table did not have."""
    reads = [column.name for column in preprocessing.columns]
    ignored = {preprocessing.label_column, *(name for name, _ in preprocessing.dropped)}
    missing = [name for name in reads if name not in header]
    extra = [name for name in header if name not in reads and name not in ignored]
    problems = []
    if missing:
        problems.append(f"lacks the column(s) {', '.join(map(repr, missing))} the model reads")
    if extra:
        problems.append(f"has the column(s) {', '.join(map(repr, extra))} the model was not trained on")
    if problems:
        raise DatasetError(f"{path} {' and '.join(problems)}: its columns must be {', '.join(map(repr, reads))} "
                           f"(the label column {preprocessing.label_column!r} may be there too, and is ignored)")


def predict(fetched: FetchedModel, path: pathlib.Path) -> list[dict]:
    """An answer per row of the CSV at `path` (`answers`), in the file's order."""
    table, lines = read_rows(path, fetched.preprocessing)
    features = fetched.preprocessing.transform(table, str(path), lines)
    with torch.no_grad():
        outputs = fetched.model(torch.from_numpy(features))
    return answers(outputs, fetched, lines)


def answers(outputs: torch.Tensor, fetched: FetchedModel, lines: list[int]) -> list[dict]:
    """The model's outputs, one row each, as answers: the row's line, the most probable label and its
    probability (the softmax of the outputs over the classes); for a regression table the predicted value, its
    one output (standardized, as it was trained) brought back to the target column's own units. The one place
    outputs become what a requester reads."""
    target = fetched.preprocessing.target
    if target is not None:
        values = target.restore(outputs.double().numpy()[:, 0])
        return [{"line": line, "value": float(value)} for line, value in zip(lines, values)]
    probabilities = torch.softmax(outputs.double(), dim=1)
    best, index = probabilities.max(dim=1)
    return [{"line": line, "label": fetched.labels[int(i)], "probability": float(p)}
            for line, i, p in zip(lines, index, best)]
