"""What `trolly-localnet demo` trains (`--task`): the dataset the requester serves, the spec built around it, the
task's timing on chain and the accuracy the fetched model must reach.

- `digits` (the default): an MLP trained from random weights on the bundled 8x8 digits.
- `lora-text`: the pinned all-MiniLM-L6-v2 fine-tuned with LoRA adapters on its attention projections and a
  linear head, on pydocs (standard-library docstrings labelled by their package, 8 labels). Its spec comes from
  `compute.spec.lora_text_spec`, the builder `benchmarks.finetune` measures, so a change to the LoRA task's
  codec or optimizer reaches the demo too; the demo only sizes it down (rank, batch, steps) to take a couple of
  minutes on 2 cores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from trolly.compute.spec import example_spec, lora_text_spec

ACCURACY_FLOOR = 0.85
"""The demo's trained MLP must reach at least this accuracy on the held-out digits (chance is 0.10), with room
below what the demo's spec reaches (docs/performance.md)."""

LORA_TEXT_ACCURACY_FLOOR = 0.35
"""The LoRA task's fetched model must reach at least this accuracy on pydocs' held-out split. Chance is 1/8, and
a model that learnt only the label frequencies answers the most common package (`tkinter`, 148 of the 506
held-out docstrings: 0.29); the floor sits above that, so it passes only where the adapters and the head read
the text. It is far below what the pretrained encoder can reach (benchmarks.finetune's `accuracy_alone`): the
demo trains a few short rounds through a top-k codec, and the floor says the task learnt, not how well LoRA
fine-tunes (docs/performance.md)."""

DEMO_ROUNDS = 4
"""The digits task's default rounds."""
LORA_TEXT_ROUNDS = 2
"""The LoRA task's default rounds: each of its steps costs what hundreds of the MLP's do."""


def digits_spec(manifest_hash: str, data_url: str, rounds: int) -> bytes:
    document = example_spec(
        manifest_hash,
        model={"arch": "mlp", "config": {"hidden": [128]}},
        dataset={"name": "digits", "manifest_hash": manifest_hash, "urls": [data_url]},
        training={
            "rounds": rounds, "inner_steps": 40, "batch_size": 32, "checkpoint_every": 10, "seed": 2026,
            "inner_optimizer": {"name": "adamw", "lr": 0.005, "weight_decay": 0.0},
            "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9},
        },
        codec="int8",
    )
    return json.dumps(document, sort_keys=True).encode()


def lora_text_demo_spec(manifest_hash: str, data_url: str, rounds: int) -> bytes:
    document = lora_text_spec(manifest_hash, rank=4, batch_size=8, rounds=rounds, inner_steps=20,
                              dataset={"name": "pydocs", "manifest_hash": manifest_hash, "urls": [data_url]})
    return json.dumps(document, sort_keys=True).encode()


@dataclass(frozen=True)
class DemoTask:
    name: str
    dataset: str
    """The bundled dataset the requester builds and serves (a worker may build it itself instead)."""
    spec: Callable[[str, str, int], bytes]
    """(manifest hash, the served data's URL, rounds) -> the spec's bytes."""
    rounds: int
    accuracy_floor: float
    round_blocks: int
    """Blocks a round's commit phase stays open: a LoRA round's training, on workers that share 2 cores with
    the nodes and verifiers, takes several times the MLP's."""
    timeout: float
    """Seconds the demo follows the task by default."""


DEMO_TASKS = {
    "digits": DemoTask("digits", "digits", digits_spec, DEMO_ROUNDS, ACCURACY_FLOOR, round_blocks=60, timeout=300.0),
    "lora-text": DemoTask("lora-text", "pydocs", lora_text_demo_spec, LORA_TEXT_ROUNDS, LORA_TEXT_ACCURACY_FLOOR,
                          round_blocks=240, timeout=900.0),
}
