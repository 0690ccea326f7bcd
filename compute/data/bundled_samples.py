"""Raw samples of the bundled datasets, before sharding.

digits: scikit-learn's `load_digits` (1,797 8x8 images, pixel values 0..16 scaled to [0, 1]); every fifth
image (index % 5 == 0) is the test split, so both splits cover all writers.

pycorpus: the `.py` files directly in the Python standard library directory, in sorted order, concatenated
and cut to `max_bytes`, split into non-overlapping windows of context + 1 bytes (input and shifted target);
every tenth window is test. The bytes depend on the installed Python, so the manifest hash does too: the
requester builds it once and serves it, workers only fetch by hash.
"""

from __future__ import annotations

import pathlib
import sysconfig

import numpy as np

DIGITS_TEST_EVERY = 5
CORPUS_TEST_EVERY = 10
CORPUS_CONTEXT = 64
CORPUS_MAX_BYTES = 2_000_000


def digits_samples() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    inputs = (digits.data / 16.0).astype(np.float32)
    targets = digits.target.astype(np.int64)
    test = np.arange(len(targets)) % DIGITS_TEST_EVERY == 0
    return {"train": (inputs[~test], targets[~test]), "test": (inputs[test], targets[test])}


def corpus_bytes(max_bytes: int = CORPUS_MAX_BYTES) -> bytes:
    directory = pathlib.Path(sysconfig.get_paths()["stdlib"])
    pieces: list[bytes] = []
    total = 0
    for path in sorted(directory.glob("*.py")):
        data = path.read_bytes()
        pieces.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return b"".join(pieces)[:max_bytes]


def corpus_samples(max_bytes: int = CORPUS_MAX_BYTES, context: int = CORPUS_CONTEXT) -> dict[str, np.ndarray]:
    data = np.frombuffer(corpus_bytes(max_bytes), dtype=np.uint8)
    windows = data[: len(data) // (context + 1) * (context + 1)].reshape(-1, context + 1)
    test = np.arange(len(windows)) % CORPUS_TEST_EVERY == 0
    return {"train": windows[~test], "test": windows[test]}
