"""What `trolly-localnet demo` trains (`--task`): the data the requester serves, the spec built around it, the
task's timing on chain and the accuracy the fetched model must reach.

- `digits` (the default): an MLP trained from random weights on the bundled 8x8 digits, served in clear.
- `digits-wasm32`: the same, its spec allowing the `wasm32` kernel beside torch, so that browser workers (the
  console's worker page) and `--wasm32-workers` can train it; its data is served with CORS, which a tab needs.
- `lora-text`: the pinned all-MiniLM-L6-v2 fine-tuned with LoRA adapters on its attention projections and a
  linear head, on the requester's own texts: pydocs (standard-library docstrings labelled by their package, 8
  labels) written as a JSONL file of `{"text", "label"}` lines and packed as `trolly-wallet data pack
  pydocs.jsonl --model lora-text` packs it, private, and re-encrypted for the task under a key of its own, as
  `task submit --data` does (`compute.data.packing.for_one_task`): only the task's members, once it runs, and
  the validators drawn to check it receive that key. Its spec comes from `compute.spec.lora_text_spec`, the builder
  `benchmarks.finetune` measures, so a change to the LoRA task's codec or optimizer reaches the demo too; the
  demo only sizes it down (rank, batch, steps) to take a few minutes on 2 cores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trolly.chain.market.data_keys import data_key_hash
from trolly.compute.blobs import BlobStore
from trolly.compute.data import Dataset, build_dataset, load_dataset
from trolly.compute.data.docstrings import PACKAGES, docstrings
from trolly.compute.data.encryption import new_data_key
from trolly.compute.data.packing import LORA_TEXT, for_one_task, pack_file, write_packed
from trolly.compute.spec import example_spec, lora_text_spec
from trolly.wallet.files import write_atomically

ACCURACY_FLOOR = 0.85
"""The demo's trained MLP must reach at least this accuracy on the held-out digits (chance is 0.10), with room
below what the demo's spec reaches (docs/performance.md)."""

LORA_TEXT_ACCURACY_FLOOR = 0.35
"""The LoRA task's fetched model must reach at least this accuracy on pydocs' held-out split. Chance is 1/8, and
a model that learnt only the label frequencies answers the most common package (`tkinter`, 148 of the 506
held-out docstrings: 0.29); the floor sits above that, so it passes only where the adapters and the head read
the text. It is far below what the demo reaches (docs/performance.md): the floor says the task learnt, not how
well LoRA fine-tunes (benchmarks.finetune measures that), and holds on a machine loaded enough to slow it."""

DEMO_ROUNDS = 4
"""The digits task's default rounds."""
LORA_TEXT_ROUNDS = 2
"""The LoRA task's default rounds: each of its steps costs what hundreds of the MLP's do."""


@dataclass(frozen=True)
class DemoData:
    """The data the requester serves: its blob store, manifest hash and (private data) data key, and the spec's
    `dataset` section for it served at a URL."""

    store: BlobStore
    manifest_hash: str
    key: bytes | None
    section: Callable[[str], dict]

    def dataset(self) -> Dataset:
        """The data as the requester reads it (decrypted with its key), for the observer and the evaluation."""
        return load_dataset(self.manifest_hash, self.store.get, self.key)

    @property
    def key_hash(self) -> bytes:
        """The task's commitment to its private data's key (b"" for public data)."""
        return b"" if self.key is None else data_key_hash(self.key)


def digits_data(directory: Path) -> DemoData:
    """The bundled digits, built and stored in `directory` (a worker may build them itself instead)."""
    blobs = build_dataset("digits")
    store = BlobStore(directory)
    for digest, blob in blobs.all_blobs().items():
        store.put(blob, expected=digest)
    return DemoData(store, blobs.manifest_hash, None,
                    lambda url: {"name": "digits", "manifest_hash": blobs.manifest_hash, "urls": [url]})


def write_pydocs_jsonl(path: Path) -> int:
    """pydocs as a requester's file: one `{"text", "label"}` line per docstring, the label its package's name;
    returns the lines written."""
    samples = docstrings()
    lines = "".join(json.dumps({"text": text, "label": PACKAGES[label]}) + "\n" for text, label in samples)
    write_atomically(path, lines.encode(), mode=0o644)
    return len(samples)


def pydocs_data(directory: Path) -> DemoData:
    """pydocs written as `directory/pydocs.jsonl` and packed from it for lora-text, private, into
    `directory/demo-data`: what `trolly-wallet data pack pydocs.jsonl -o demo-data --model lora-text` does; then
    the task's own copy of it, as `task submit --data` makes one (`for_one_task`)."""
    source = directory / "pydocs.jsonl"
    write_pydocs_jsonl(source)
    key = new_data_key()
    blobs, labels, source_format = pack_file(source, LORA_TEXT, key=key)
    packed = for_one_task(write_packed(blobs, labels, source_format, directory / "demo-data", key))
    return DemoData(packed.store, packed.manifest_hash, packed.key, lambda url: packed.spec_dataset([url]))


def digits_spec(dataset: dict, rounds: int, kernels: tuple[str, ...] = ()) -> bytes:
    """The digits MLP; `kernels` (when given) the training kernels its spec allows (`determinism.kernels`)."""
    document = example_spec(
        dataset["manifest_hash"],
        model={"arch": "mlp", "config": {"hidden": [128]}},
        dataset=dataset,
        **({"determinism": {"threads": 1, "kernels": list(kernels)}} if kernels else {}),
        training={
            "rounds": rounds, "inner_steps": 40, "batch_size": 32, "checkpoint_every": 10, "seed": 2026,
            "inner_optimizer": {"name": "adamw", "lr": 0.005, "weight_decay": 0.0},
            "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9},
        },
        codec="int8",
    )
    return json.dumps(document, sort_keys=True).encode()


def digits_wasm32_spec(dataset: dict, rounds: int) -> bytes:
    """The digits MLP allowing the `wasm32` kernel beside torch: browser tabs (the console's `/worker` page,
    fetching the digits from the demo's data server) and `--wasm32-workers` may train it."""
    return digits_spec(dataset, rounds, ("torch", "wasm32"))


def lora_text_demo_spec(dataset: dict, rounds: int) -> bytes:
    document = lora_text_spec(dataset["manifest_hash"], rank=4, batch_size=8, rounds=rounds, inner_steps=20,
                              dataset=dataset)
    return json.dumps(document, sort_keys=True).encode()


@dataclass(frozen=True)
class DemoTask:
    name: str
    data: Callable[[Path], DemoData]
    """Writes the data the requester serves into a directory (the localnet's home)."""
    spec: Callable[[dict, int], bytes]
    """(the spec's dataset section, rounds) -> the spec's bytes."""
    rounds: int
    accuracy_floor: float
    round_blocks: int | None
    """Blocks a round's commit phase stays open; None: the requester library's window for the task's model
    (`wallet.requester.round_blocks_for`, which gives LoRA its longer one). The digits task names its own: the
    demo's workers share 2 cores with four validators' nodes and verifiers, which slows an MLP round past the
    window a requester's own node gives it."""
    timeout: float
    """Seconds the demo follows the task by default."""


DEMO_TASKS = {
    "digits": DemoTask("digits", digits_data, digits_spec, DEMO_ROUNDS, ACCURACY_FLOOR, round_blocks=60,
                       timeout=300.0),
    "digits-wasm32": DemoTask("digits-wasm32", digits_data, digits_wasm32_spec, DEMO_ROUNDS, ACCURACY_FLOOR,
                              round_blocks=60, timeout=300.0),
    "lora-text": DemoTask("lora-text", pydocs_data, lora_text_demo_spec, LORA_TEXT_ROUNDS, LORA_TEXT_ACCURACY_FLOOR,
                          round_blocks=None, timeout=900.0),
}
