"""A requester's JSONL of texts read for `lora-text`: token ids of the pinned base model's own tokenizer.

`trolly-wallet data pack texts.jsonl --model lora-text` reads the same `{"text", "label"}` lines as the MLP's
packing (`readers.jsonl_records`), but keeps the words: each text becomes `context` token ids of the base model
that `lora-text` fine-tunes (`models.base_model.base_tokenizer`, the tokenizer shipped in its package), cut and
padded (pad id 0) as pydocs is (`docstrings.py`). The requester tokenizes once, so workers and verifiers read
int32 ids and need no tokenizer; the manifest names the tokenizer's package and version, and the spec the base
model with its weights hash.
"""

from __future__ import annotations

import pathlib

import numpy as np

from trolly.chain.market.base_models import BaseModel

from ..errors import DatasetError
from .readers import jsonl_records, LabelledSamples

DEFAULT_CONTEXT = 64
"""Tokens per text by default: pydocs' context, which holds most short texts (a docstring's first lines)."""


def read_jsonl_tokens(path: pathlib.Path, base: BaseModel, context: int = DEFAULT_CONTEXT) -> LabelledSamples:
    """The texts of a JSONL file as (n, context) int32 token ids of `base`'s tokenizer, with their labels."""
    from ..models.base_model import base_tokenizer

    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    if path.is_dir() or path.suffix.lower() not in (".jsonl", ".ndjson"):
        raise DatasetError(f"{path}: lora-text reads texts, pack a .jsonl file of {{\"text\", \"label\"}} lines")
    if not 1 <= context <= base.max_positions:
        raise DatasetError(f"the context must be 1..{base.max_positions} tokens ({base.package} reads at most "
                           f"{base.max_positions}), got {context}")
    texts, labels = jsonl_records(path)
    tokenizer = base_tokenizer(base, context)
    tokens = np.array([encoding.ids for encoding in tokenizer.encode_batch(list(texts))], dtype=np.int32)
    return LabelledSamples(tokens, labels, "jsonl",
                           {"tokenizer": {"package": base.package, "version": base.version},
                            "truncation": "cut and padded to the context, pad id 0"}, context=context)
