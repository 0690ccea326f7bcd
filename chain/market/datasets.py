"""The datasets a spec may name, and the shape each gives a model: bundled ones by name, packed ones declared.

A bundled dataset (`digits`, `pycorpus`, `pydocs`) is built by every worker from files it already has, so its
name fixes its shape. A `packed` dataset is a requester's own data (`trolly-wallet data pack`), fetched by
manifest hash: classification samples of `input_size` float features and `num_classes` labels, or, when it
declares a `context`, texts as `context` token ids of a base model's tokenizer (its `input_size` too) with one
of `num_classes` labels each, which only `lora-text` reads; or, when it declares `"task": "regression"`, samples
of features with one number to predict each (`num_classes` 1, no context). Its spec declares the sizes in its `dataset`
section, so the chain can bound the model it asks for (`market.footprint`) without seeing the data; a worker
refuses a manifest whose shape differs from the declared one (`compute/worker/data.py`), so the bound cannot
be dodged by declaring a small shape.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidSpec

BUNDLED_SHAPES = {"digits": (64, 10, 0), "pycorpus": (64, 256, 64), "pydocs": (64, 8, 64)}
"""name -> (input_size, num_classes or vocabulary, context), as `compute/data/manifest.py` builds them. pydocs is
text classification: 64 token ids per sample (its context) and 8 labels (`compute/data/docstrings.py`)."""
TEXT_CLASSIFICATION = ("pydocs",)
"""The bundled datasets of token windows with one label each, which only `lora-text` reads."""
PACKED = "packed"
DATASETS = ("digits", PACKED, "pycorpus", "pydocs")
PACKED_SHAPE_FIELDS = ("input_size", "num_classes")
"""The `dataset` fields a packed dataset's spec must have (and a bundled one's must not)."""
PACKED_CONTEXT_FIELD = "context"
"""The `dataset` field a packed dataset of token ids declares (a bundled one's must not): tokens per sample."""
PACKED_TASK_FIELD = "task"
"""The `dataset` field naming what a packed dataset's samples are labelled for (a bundled one's must not):
one of `TASKS`; absent means classification."""
CLASSIFICATION = "classification"
REGRESSION = "regression"
TASKS = (CLASSIFICATION, REGRESSION)
"""What a packed dataset's labels are: classes to pick from (`num_classes` of them, at least 2), or a number to
predict (`num_classes` 1, the model's one output; features only, no context)."""
MAX_PACKED_INPUT_SIZE = 1 << 16
"""Most features per sample of a packed dataset (a 128x128 RGB image flattened is 49,152)."""
MAX_PACKED_CLASSES = 1 << 12
"""Most labels of a packed dataset."""
MAX_PACKED_SAMPLES = 1_000_000
"""Most samples (rows, images, texts) a packed dataset may hold, train and held-out together. Checked by
`trolly-wallet data pack` before anything is paid, beside the chain's own bounds on what a spec may declare,
the market params `max_dataset_shards` and `max_dataset_bytes` (`SubmitTask` checks the spec's
`dataset.max_shards` and `max_bytes` against them, a worker and a verifier check the manifest against the
spec). The chain never sees the rows, so this bound is the pack's alone: it keeps a pack in memory."""


def _bounded(value: Any, where: str, maximum: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidSpec(f"{where} must be an integer in {minimum}..{maximum}, got {value!r}")
    return value


def dataset_shape(dataset: dict) -> tuple[int, int, int]:
    """(input_size, num_classes, context) of a spec's `dataset` section, whose name is one of DATASETS."""
    name = dataset.get("name")
    if name not in DATASETS:
        raise InvalidSpec(f"dataset.name must be one of {', '.join(DATASETS)}, got {name!r}")
    declared = [field for field in (*PACKED_SHAPE_FIELDS, PACKED_CONTEXT_FIELD, PACKED_TASK_FIELD)
                if field in dataset]
    if name != PACKED:
        if declared:
            raise InvalidSpec(f"dataset {name!r} is bundled: its shape is fixed, drop dataset.{declared[0]}")
        return BUNDLED_SHAPES[name]
    missing = [field for field in PACKED_SHAPE_FIELDS if field not in dataset]
    if missing:
        raise InvalidSpec(f"a packed dataset must declare dataset.{missing[0]}")
    input_size = _bounded(dataset["input_size"], "dataset.input_size", MAX_PACKED_INPUT_SIZE)
    if dataset_task(dataset) == REGRESSION:
        if PACKED_CONTEXT_FIELD in dataset:
            raise InvalidSpec("a regression dataset holds features, not token ids: drop dataset.context")
        classes = dataset["num_classes"]
        if not isinstance(classes, int) or isinstance(classes, bool) or classes != 1:
            raise InvalidSpec(f"a regression dataset predicts one number: dataset.num_classes must be 1, "
                              f"got {classes!r}"[:200])
        return input_size, 1, 0
    num_classes = _bounded(dataset["num_classes"], "dataset.num_classes", MAX_PACKED_CLASSES, 2)
    context = 0
    if PACKED_CONTEXT_FIELD in dataset:
        context = _bounded(dataset[PACKED_CONTEXT_FIELD], "dataset.context", MAX_PACKED_INPUT_SIZE)
        if context != input_size:
            raise InvalidSpec(f"a packed dataset of token ids has dataset.input_size equal to its dataset.context "
                              f"(tokens per sample), got {input_size} and {context}")
    return input_size, num_classes, context


def dataset_task(dataset: dict) -> str:
    """What a spec's `dataset` section's labels are (`TASKS`): its declared `task`, classification when it declares
    none (every bundled dataset)."""
    task = dataset.get(PACKED_TASK_FIELD, CLASSIFICATION)
    if not isinstance(task, str) or task not in TASKS:
        raise InvalidSpec(f"dataset.task must be one of {', '.join(TASKS)}, got {task!r}"[:200])
    return task


def is_text_classification(name: str, context: int) -> bool:
    """Whether a dataset of this name and context (`dataset_shape`'s) holds token ids with one label each, the
    data `lora-text` reads: pydocs, or packed data declaring a context."""
    return name in TEXT_CLASSIFICATION or (name == PACKED and context > 0)
