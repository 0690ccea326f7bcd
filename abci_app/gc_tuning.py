"""The node's garbage collector settings: when the app process scans memory, never what it answers.

Applied once the app's start-up is done, by `trolly-node start` (`cli._serve_app`) and the ABCI server's own
`main`, and by `benchmarks/app_tx_cpu.py` to run the app as a node does.
"""

from __future__ import annotations

import gc

GC_YOUNG_THRESHOLD = 50_000
"""The app process collects its youngest generation once this many more tracked objects were made than freed
(Python's default is 700). A block's transient objects (each transaction's results, events, decoded messages)
then die by reference counting before a collection walks them, instead of being walked and promoted through
every generation while the block runs; the bound still collects any cyclic garbage after that much."""


def tune_garbage_collection() -> None:
    """The app process's collector settings, applied once its start-up is done (`cli._serve_app`).

    `gc.freeze` moves everything alive then (modules, protobuf descriptors, the store) out of the
    collector's reach, so the full collections that remain no longer walk it; `GC_YOUNG_THRESHOLD` makes
    collections rare (see there). Neither changes any answer of the app, only when memory is scanned."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
