"""Reading a requester's own data into labelled feature vectors, refusing what cannot be trained on.

Three sources, each turned into float32 features (one row per sample) and one label name per sample:

- a CSV file with a header row: the label column is named (`label_column`) or the last one; the other
  columns' cells are kept raw (numbers, words, missing cells) and become features when packing has drawn the
  train split, by the preprocessing it fits on the train rows alone (`preprocessing.py`);
- a folder of images in one sub-folder per class (the folder's name is the label): every image must have the
  same size; all grayscale images stay one channel, otherwise all become RGB; pixels scaled to [0, 1] and
  flattened row by row (channel last), which is what the registry's MLP and (one channel, square) CNN read;
- JSONL with a `text` and a `label` field per line: a text becomes `TEXT_FEATURES` hashed counts of its
  lower-cased words and character trigrams (log-scaled, unit length), so the MLP can classify it (packed for
  `lora-text`, the same lines become token ids instead: `tokenized.py`).

Every refusal is a `DatasetError` that names the file, row or field and says what to fix: packing runs before
anything is paid, so bad data never costs the requester a task. A malformed CSV, an image that is not one or
claims more pixels than a packed sample may hold (read from its header, before it is decoded), and files the
system cannot read are refusals too, never a crash.

What reading holds is bounded before it is allocated: the features (`MAX_FEATURE_BYTES`), an image's pixels
(`MAX_PACKED_INPUT_SIZE` values, from its header), and a text's hashed features (counted as its words and
trigrams are found, never listed), so a small file cannot make the packer hold many times its size.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import pathlib
import re
import zlib

import numpy as np

from trolly.chain.market.datasets import MAX_PACKED_INPUT_SIZE, MAX_PACKED_SAMPLES

from ..errors import DatasetError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
GRAYSCALE_MODES = ("1", "L", "I", "I;16", "F")
TEXT_FEATURES = 512
"""Buckets of the hashed bag of words and character trigrams a text becomes."""
_WORD = re.compile(r"\w+")
MAX_FEATURE_BYTES = MAX_PACKED_SAMPLES * TEXT_FEATURES * 4
"""The most float32 features a file may be read into (they are held whole while the pack is made): the most
samples a packed dataset may hold, each a text's hashed features."""


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
    table: dict[str, list[str]] | None = None
    """A CSV's raw cells by column (the label's left out), whose features packing makes once it has drawn the
    train split (`preprocessing.py`); `inputs` is then empty (n x 0). None for other sources."""
    lines: tuple[int, ...] = ()
    """The CSV line of each row of `table`, for refusals that name it."""
    origin: str = ""
    """The file the table was read from, for refusals that name it (kept out of the manifest)."""


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
        data = path.read_bytes()
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DatasetError(f"{path} line {line} is not UTF-8 text ({error.reason} at byte {error.start}): save it "
                           f"as UTF-8 (in a spreadsheet: CSV UTF-8)") from None
    except OSError as error:
        raise DatasetError(f"{path} cannot be read: {error.strerror or error}") from None
    if not text.strip():
        raise DatasetError(f"{path} is empty: give it a header row naming the columns and one row per sample")
    return text


def features_array(samples: int, features: int, what: str) -> np.ndarray:
    """An empty float32 (samples, features) array, refused beyond `MAX_FEATURE_BYTES` before it is allocated."""
    if samples > MAX_PACKED_SAMPLES:
        raise DatasetError(f"{what} holds {samples} samples, more than the {MAX_PACKED_SAMPLES} a packed dataset may "
                           f"hold: keep a sample of your data")
    if samples * features * 4 > MAX_FEATURE_BYTES:
        raise DatasetError(f"{what} makes {samples} samples of {features} features, more than "
                           f"{MAX_FEATURE_BYTES >> 20} MiB of features: keep a sample of your data")
    return np.empty((samples, features), dtype=np.float32)


def _csv_rows(path: pathlib.Path, text: str):
    """(line number, cells) of each non-empty row; a malformed CSV (a NUL byte, a field past the csv module's
    limit, an unclosed quote) is a refusal."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if row:
                yield reader.line_num, row
    except csv.Error as error:
        raise DatasetError(f"{path} line {reader.line_num} is not valid CSV: {error}") from None


def read_csv(path: pathlib.Path, label_column: str | None = None) -> LabelledSamples:
    """A CSV's label per row and its other columns' raw cells (`table`), which packing turns into features with
    the preprocessing it fits on the train rows (`preprocessing.py`)."""
    text = _read_text(path)
    _, first = next(_csv_rows(path, text), (0, []))
    header = [name.strip() for name in first]
    if not header or all(_is_number(cell) for cell in header):
        raise DatasetError(f"{path} has no header row: the first row must name the columns, one of them the label")
    if len(set(header)) != len(header):
        repeated = sorted({name for name in header if header.count(name) > 1})
        raise DatasetError(f"{path}: the header names column(s) {', '.join(map(repr, repeated))} more than once: "
                           f"give each column its own name")
    if label_column is None:
        label_index = len(header) - 1
    elif label_column in header:
        label_index = header.index(label_column)
    else:
        raise DatasetError(f"{path} has no label column {label_column!r}; its columns: {', '.join(header)}")
    if len(header) < 2:
        raise DatasetError(f"{path} has only the label column {header[label_index]!r}: add feature columns")
    count = sum(1 for _ in _csv_rows(path, text)) - 1
    if count < 1:
        raise DatasetError(f"{path} has a header but no rows")
    if count > MAX_PACKED_SAMPLES:
        raise DatasetError(f"{path} holds {count} samples, more than the {MAX_PACKED_SAMPLES} a packed dataset may "
                           f"hold: keep a sample of your data")
    features = [name for i, name in enumerate(header) if i != label_index]
    cells: list[list[str]] = [[] for _ in features]
    labels, names, lines = [], {}, []
    rows = _csv_rows(path, text)
    next(rows)
    for number, row in rows:
        if len(row) != len(header):
            raise DatasetError(f"{path} line {number} has {len(row)} cells, the header has {len(header)}: give every "
                               f"row one cell per column (quote a cell that holds a comma)")
        label = row[label_index].strip()
        if not label:
            raise DatasetError(f"{path} line {number} has an empty label ({header[label_index]!r}): fill it or "
                               f"remove the row")
        labels.append(names.setdefault(label, label))  # one string per label name, however many rows
        lines.append(number)
        for column, cell in zip(cells, (cell for i, cell in enumerate(row) if i != label_index)):
            column.append(cell)
    return LabelledSamples(np.empty((count, 0), dtype=np.float32), tuple(labels), "csv",
                           {"columns": features, "label_column": header[label_index]},
                           table=dict(zip(features, cells)), lines=tuple(lines), origin=str(path))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def read_image_folders(root: pathlib.Path) -> LabelledSamples:
    """Every image's header is read first (size and mode), so an image too large to pack, or mixed sizes, is
    refused before anything is decoded; then each is decoded straight into the features, one at a time."""
    loose = sorted(p.name for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if loose:
        raise DatasetError(f"{root} holds images outside a class folder ({loose[0]}): put each image in the folder "
                           f"named after its label")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DatasetError(f"{root} holds no class folders: make one folder of images per label")
    files: list[tuple[pathlib.Path, str]] = []
    for folder in classes:
        found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not found:
            raise DatasetError(f"class folder {folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        files.extend((file, folder.name) for file in found)
    headers = [_image_header(file) for file, _ in files]
    first_file, (first_size, _) = files[0][0], headers[0]
    for (file, _), (size, _) in zip(files, headers):
        if size != first_size:
            raise DatasetError(f"mixed image sizes: {first_file} is {first_size[0]}x{first_size[1]}, {file} is "
                               f"{size[0]}x{size[1]}; resize every image to one size")
    grayscale = all(mode in GRAYSCALE_MODES for _, mode in headers)
    mode, channels = ("L", 1) if grayscale else ("RGB", 3)
    width, height = first_size
    if width * height * channels > MAX_PACKED_INPUT_SIZE:
        raise DatasetError(f"{first_file} is {width}x{height} with {channels} channel(s): {width * height * channels} "
                           f"values, more than the {MAX_PACKED_INPUT_SIZE} a packed sample may hold; make the images "
                           f"smaller")
    inputs = features_array(len(files), height * width * channels, str(root))
    for row, (file, _) in enumerate(files):
        inputs[row] = _decoded(file, mode).reshape(-1) / 255.0
    return LabelledSamples(inputs, tuple(label for _, label in files), "images",
                           {"height": height, "width": width, "channels": channels})


def _image_header(file: pathlib.Path) -> tuple[tuple[int, int], str]:
    """An image's size and mode from its header alone (Pillow decodes nothing until asked), refused when its
    pixels alone pass what a packed sample may hold."""
    with _opened(file) as image:
        size, mode = image.size, image.mode
    if size[0] * size[1] > MAX_PACKED_INPUT_SIZE:
        raise DatasetError(f"{file} is {size[0]}x{size[1]}: more pixels than the {MAX_PACKED_INPUT_SIZE} values a "
                           f"packed sample may hold; make the images smaller")
    return size, mode


def _decoded(file: pathlib.Path, mode: str) -> np.ndarray:
    with _opened(file) as image:
        try:
            return np.asarray(image.convert(mode), dtype=np.float32)
        except (OSError, ValueError) as error:  # a truncated or corrupt image shows only when decoded
            raise DatasetError(f"{file} is not a readable image: {error}") from None


def _opened(file: pathlib.Path):
    """`Image.open` (the header only), with what a hostile file makes Pillow raise as refusals: not an image,
    a decompression bomb (more pixels than Pillow itself allows), an unreadable file."""
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(file)
    except Image.DecompressionBombError as error:
        raise DatasetError(f"{file} claims too many pixels to be decoded safely: {error}") from None
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise DatasetError(f"{file} is not a readable image: {error}") from None


def text_features(text: str) -> np.ndarray:
    """The hashed bag of lower-cased words and character trigrams of `text`: log(1 + count) per bucket
    (crc32 of the UTF-8 token, so every machine gives the same vector), scaled to unit length."""
    lowered = text.lower()
    counts = [0] * TEXT_FEATURES
    for word in _WORD.finditer(lowered):  # each token counted as it is found: nothing listed per text
        counts[zlib.crc32(word.group().encode("utf-8")) % TEXT_FEATURES] += 1
    for start in range(len(lowered) - 2):
        counts[zlib.crc32(lowered[start:start + 3].encode("utf-8")) % TEXT_FEATURES] += 1
    vector = np.log1p(np.array(counts, dtype=np.float64))
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm else vector).astype(np.float32)


def read_jsonl(path: pathlib.Path) -> LabelledSamples:
    texts, labels = jsonl_records(path)
    inputs = features_array(len(texts), TEXT_FEATURES, str(path))
    for row, text in enumerate(texts):
        inputs[row] = text_features(text)
    return LabelledSamples(inputs, labels, "jsonl",
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
