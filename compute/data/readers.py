"""Reading a requester's own data into labelled feature vectors, refusing what cannot be trained on.

Three sources, each turned into float32 features (one row per sample) and one label name per sample:

- a CSV file with a header row: every column but the label is a numeric feature; the label column is named
  (`label_column`) or the last one;
- a folder of images in one sub-folder per class (the folder's name is the label): every image must have the
  same size; all grayscale images stay one channel, otherwise all become RGB; pixels scaled to [0, 1] and
  flattened row by row (channel last), which is what the registry's MLP and (one channel, square) CNN read;
- JSONL with a `text` and a `label` field per line: a text becomes `TEXT_FEATURES` hashed counts of its
  lower-cased words and character trigrams (log-scaled, unit length), so the MLP can classify it (packed for
  `lora-text`, the same lines become token ids instead: `tokenized.py`).

Every refusal is a `DatasetError` that names the file, row or field and says what to fix: packing runs before
anything is paid, so bad data never costs the requester a task.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
import re
import zlib

import numpy as np

from ..errors import DatasetError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
GRAYSCALE_MODES = ("1", "L", "I", "I;16", "F")
TEXT_FEATURES = 512
"""Buckets of the hashed bag of words and character trigrams a text becomes."""
_WORD = re.compile(r"\w+")


@dataclasses.dataclass(frozen=True)
class LabelledSamples:
    """Samples as float32 features (n, features), or as int32 token ids (n, context), and each sample's label
    name, with what they came from."""

    inputs: np.ndarray
    labels: tuple[str, ...]
    source_format: str
    feature_description: dict
    """What a feature is, kept in the manifest: the CSV's columns, the image size, the text hashing, or the
    tokenizer."""
    context: int = 0
    """Tokens per sample when the inputs are token ids (`tokenized.py`), 0 when they are features."""


def read_samples(path: pathlib.Path, label_column: str | None = None) -> LabelledSamples:
    """The samples of a CSV file, a JSONL file or a folder of class folders of images."""
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    if path.is_dir():
        if label_column is not None:
            raise DatasetError("--label-column is for CSV files; an image folder's labels are its class folders")
        return read_image_folders(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_csv(path, label_column)
    if suffix in (".jsonl", ".ndjson"):
        if label_column is not None:
            raise DatasetError("--label-column is for CSV files; JSONL lines carry a `label` field")
        return read_jsonl(path)
    raise DatasetError(f"{path}: pack a .csv file, a .jsonl file, or a folder with one folder of images per class")


def _read_text(path: pathlib.Path) -> str:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    if not text.strip():
        raise DatasetError(f"{path} is empty")
    return text


def _number(cell: str, where: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise DatasetError(f"{where}: {cell!r} is not a number (every column but the label must be numeric)") from None
    if not math.isfinite(value):
        raise DatasetError(f"{where}: {cell!r} is not a finite number")
    return value


def read_csv(path: pathlib.Path, label_column: str | None = None) -> LabelledSamples:
    rows = list(csv.reader(_read_text(path).splitlines()))
    rows = [row for row in rows if row]
    header = [name.strip() for name in rows[0]]
    if all(_is_number(cell) for cell in header):
        raise DatasetError(f"{path} has no header row: the first row must name the columns, one of them the label")
    if label_column is None:
        label_index = len(header) - 1
    elif label_column in header:
        label_index = header.index(label_column)
    else:
        raise DatasetError(f"{path} has no label column {label_column!r}; its columns: {', '.join(header)}")
    if len(header) < 2:
        raise DatasetError(f"{path} has only the label column {header[label_index]!r}: add feature columns")
    if len(rows) < 2:
        raise DatasetError(f"{path} has a header but no rows")
    features = [name for i, name in enumerate(header) if i != label_index]
    inputs = np.empty((len(rows) - 1, len(features)), dtype=np.float32)
    labels = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DatasetError(f"{path} line {number} has {len(row)} cells, the header has {len(header)}")
        label = row[label_index].strip()
        if not label:
            raise DatasetError(f"{path} line {number} has an empty label ({header[label_index]!r})")
        labels.append(label)
        cells = [cell for i, cell in enumerate(row) if i != label_index]
        inputs[number - 2] = [_number(cell, f"{path} line {number}, column {name!r}") for cell, name in zip(cells, features)]
    return LabelledSamples(inputs, tuple(labels), "csv", {"columns": features, "label_column": header[label_index]})


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def read_image_folders(root: pathlib.Path) -> LabelledSamples:
    from PIL import Image, UnidentifiedImageError

    loose = sorted(p.name for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if loose:
        raise DatasetError(f"{root} holds images outside a class folder ({loose[0]}): put each image in the folder "
                           f"named after its label")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DatasetError(f"{root} holds no class folders: make one folder of images per label")
    images: list[tuple[pathlib.Path, str, object]] = []
    for folder in classes:
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DatasetError(f"class folder {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        for file in files:
            try:
                with Image.open(file) as opened:
                    opened.load()
                    images.append((file, folder.name, opened.copy()))
            except (UnidentifiedImageError, OSError) as error:
                raise DatasetError(f"{file} is not a readable image: {error}") from None
    first_file, _, first = images[0]
    for file, _, image in images:
        if image.size != first.size:
            raise DatasetError(f"mixed image sizes: {first_file} is {first.size[0]}x{first.size[1]}, {file} is "
                               f"{image.size[0]}x{image.size[1]}; resize every image to one size")
    grayscale = all(image.mode in GRAYSCALE_MODES for _, _, image in images)
    mode, channels = ("L", 1) if grayscale else ("RGB", 3)
    width, height = first.size
    inputs = np.empty((len(images), height * width * channels), dtype=np.float32)
    for row, (_, _, image) in enumerate(images):
        inputs[row] = np.asarray(image.convert(mode), dtype=np.float32).reshape(-1) / 255.0
    return LabelledSamples(inputs, tuple(label for _, label, _ in images), "images",
                           {"height": height, "width": width, "channels": channels})


def text_features(text: str) -> np.ndarray:
    """The hashed bag of lower-cased words and character trigrams of `text`: log(1 + count) per bucket
    (crc32 of the UTF-8 token, so every machine gives the same vector), scaled to unit length."""
    lowered = text.lower()
    tokens = _WORD.findall(lowered) + [lowered[i:i + 3] for i in range(len(lowered) - 2)]
    counts = np.zeros(TEXT_FEATURES, dtype=np.float64)
    for token in tokens:
        counts[zlib.crc32(token.encode("utf-8")) % TEXT_FEATURES] += 1.0
    vector = np.log1p(counts)
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm else vector).astype(np.float32)


def read_jsonl(path: pathlib.Path) -> LabelledSamples:
    texts, labels = jsonl_records(path)
    return LabelledSamples(np.stack([text_features(text) for text in texts]), labels, "jsonl",
                           {"text_features": TEXT_FEATURES, "hashing": "crc32 of lower-cased words and character "
                                                                        "trigrams, log(1 + count), unit length"})


def jsonl_records(path: pathlib.Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The texts and label names of a JSONL file of `{"text", "label"}` objects (blank lines skipped)."""
    texts, labels = [], []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise DatasetError(f"{path} line {number} is not JSON: {error}") from None
        if not isinstance(record, dict):
            raise DatasetError(f"{path} line {number} is not a JSON object with `text` and `label`")
        for field in ("text", "label"):
            if field not in record:
                raise DatasetError(f"{path} line {number} has no {field!r} field (each line needs `text` and `label`)")
        text, label = record["text"], record["label"]
        if not isinstance(text, str):
            raise DatasetError(f"{path} line {number}: `text` must be a string")
        if isinstance(label, bool) or not isinstance(label, (str, int)) or not str(label).strip():
            raise DatasetError(f"{path} line {number}: `label` must be a non-empty string or an integer")
        texts.append(text)
        labels.append(str(label).strip())
    return tuple(texts), tuple(labels)
