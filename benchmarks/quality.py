"""Model quality on tables as people have them: the network's model against what a requester gets alone.

Each table (`benchmarks/_quality_tables.py`: scikit-learn's iris, wine, breast cancer and digits, and two
generated tables with skewed scales, words and missing cells, one of them 1:9 imbalanced) is written as a CSV,
packed as `trolly-wallet data pack` packs it (`compute.data.packing.pack_file`: the preprocessing fitted on the
train split), and trained with the spec `task submit --data` builds for it (`compute.requester.budget`: the MLP,
optimizer, batch size and epochs-sized budget, the spec's codec):

- ours:     3 workers over the spec's DiLoCo rounds, through the real worker path (`compute.pipeline.
            simulate_diloco`: `run_round`, each update encoded with the spec's codec and error feedback, and
            `outer_step.aggregate_round` on what the bytes decode to);
- alone:    the same MLP trained by one worker for the same total budget (3 x rounds x inner steps, one round,
            the same schedule), nothing exchanged;
- baseline: `compute.requester.baseline.fit_baseline`, what `task eval` prints beside the score: a logistic
            regression on the same split and the same features.

All three are scored on the table's held-out split with `baseline.metric_of`'s metric (accuracy; balanced
accuracy on an imbalanced table). `worst_gap` is the least, over the classification tables, of ours minus the
better of baseline and alone: the target is worst_gap >= -0.01. Diabetes is a regression table (packed with
`--task regression`, scored by R^2): its target, `worst_regression_gap`, is R^2 within 0.02 of the best.

    python -m benchmarks.quality [--quick] [--tables iris,churn] [--text] [--lr 0.003 --batch-size 32 ...]

`--text` adds the LoRA text task (pydocs): `text` holds ours, the baseline (TF-IDF + logistic regression), the
head on the frozen encoder and alone from `benchmarks.finetune.lora_text_row`, and `text_gap` is ours minus the
better of the baseline and the head (target >= -0.01, as `finetune` judges it).

--quick writes the generated tables at `QUICK_ROWS` rows instead of `FULL_ROWS`. The training options override
the defaults (`budget.TABLE_TRAINING`) for a sweep. Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import tempfile
import time

from benchmarks._quality_tables import TABLES, Table
from trolly.compute.data.packing import pack_file, write_packed
from trolly.compute.outer_step import GlobalState
from trolly.compute.pipeline import simulate_diloco
from trolly.compute.requester.baseline import fit_baseline, held_out_score
from trolly.compute.requester.budget import TABLE_TRAINING, TableTraining, budget_for, table_spec
from trolly.compute.requester.cli import DATA_CODEC
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer, initial_weights, run_round

WORKERS = 3
QUICK_ROWS = 2_000
FULL_ROWS = 20_000
SUPPORTED_TASKS = ("classification", "regression")
"""The tasks `data pack` packs: a table of another kind is reported as skipped, never silently left out."""
DEFAULT_TABLES = tuple(name for name, table in TABLES.items())
URL = "http://127.0.0.1:8600"
TARGET_GAP = -0.01
"""The least a classification table's ours minus the better of baseline and alone may be; a regression table's R^2
may be 0.02 below the best (`worst_regression_gap`)."""


def packed_table(table: Table, rows: int | None, directory: pathlib.Path):
    """`table` written as a CSV of `rows` rows under `directory` and packed as a requester packs it."""
    source = directory / f"{table.name}.csv"
    table.write(source, rows)
    blobs, labels, source_format = pack_file(source, "mlp", table.label, task=table.task)
    return write_packed(blobs, labels, source_format, directory / table.name)


def trained(spec, dataset, workers: int, rounds: int, steps: int):
    """The final weights of `workers` workers over `rounds` DiLoCo rounds of `steps` steps (one worker: its
    round's end weights, no outer step)."""
    trainer = Trainer(spec, dataset)
    start = GlobalState.initial(initial_weights(spec, dataset.shape))
    try:
        if workers == 1:
            return run_round(trainer, start.weights, worker_index=0, round_index=0, steps=steps).end_weights
        state, _ = simulate_diloco(trainer, start, workers=workers, rounds=rounds, steps=steps)
        return state.weights
    finally:
        trainer.close()


def scored(spec, dataset, weights, metric: str) -> float:
    trainer = Trainer(spec, dataset)
    trainer.model.load_state_dict(weights)
    try:
        return held_out_score(trainer.model, dataset, metric)
    finally:
        trainer.close()


def measure_table(table: Table, rows: int | None, training: TableTraining, epochs: float | None,
                  directory: pathlib.Path) -> dict:
    began = time.perf_counter()
    packed = packed_table(table, rows, directory)
    dataset = packed.load()
    budget = budget_for(packed.train_samples, training.batch_size, epochs, training=training)
    document = table_spec(packed.manifest_hash, "mlp", {"hidden": list(training.hidden)}, budget, DATA_CODEC, training)
    document["dataset"] = packed.spec_dataset([URL])
    spec = parse_spec(json.dumps(document))
    alone_document = json.loads(json.dumps(document))
    alone_document["training"].update(rounds=1, inner_steps=WORKERS * budget.steps)
    alone_spec = parse_spec(json.dumps(alone_document))

    baseline = fit_baseline(dataset)
    metric = baseline["metric"]
    ours = scored(spec, dataset, trained(spec, dataset, WORKERS, budget.rounds, budget.inner_steps), metric)
    alone = scored(alone_spec, dataset, trained(alone_spec, dataset, 1, 1, WORKERS * budget.steps), metric)
    return {"metric": metric, "ours": round(ours, 4), "baseline": round(baseline["baseline"], 4),
            "alone": round(alone, 4), "gap": round(ours - max(baseline["baseline"], alone), 4),
            "train_rows": packed.train_samples, "test_rows": packed.test_samples, "features": packed.input_size,
            "rounds": budget.rounds, "inner_steps": budget.inner_steps, "epochs": round(budget.epochs, 2),
            "baseline_seconds": baseline["seconds"], "seconds": round(time.perf_counter() - began, 1)}


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"generated tables of {QUICK_ROWS} rows, not {FULL_ROWS}")
    parser.add_argument("--tables", default=",".join(DEFAULT_TABLES),
                        help=f"comma-separated tables of {', '.join(TABLES)} (default: all)")
    parser.add_argument("--text", action="store_true",
                        help="also the LoRA text task (pydocs: ours against TF-IDF and a head on the frozen encoder, "
                             "benchmarks.finetune's row; a quarter of an hour at --quick, most of an hour in full)")
    defaults = TABLE_TRAINING
    parser.add_argument("--hidden", default=",".join(map(str, defaults.hidden)), help="hidden layer sizes")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--epochs", type=float, default=None, help="every table's epochs (default: the budget's rule)")
    parser.add_argument("--default-epochs", type=float, default=defaults.epochs, help="the rule's epochs")
    parser.add_argument("--min-steps", type=int, default=defaults.min_steps, help="the rule's least steps")
    parser.add_argument("--round-steps", type=int, default=defaults.round_steps)
    parser.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    parser.add_argument("--schedule", choices=("constant", "cosine"), default=defaults.schedule)
    parser.add_argument("--outer-lr", type=float, default=defaults.outer_lr, help="the outer Nesterov step's lr")
    parser.add_argument("--outer-momentum", type=float, default=defaults.outer_momentum)
    options = parser.parse_args(argv)
    unknown = [name for name in options.tables.split(",") if name not in TABLES]
    if unknown:
        parser.error(f"unknown table(s) {', '.join(unknown)}: choose from {', '.join(TABLES)}")
    return options


def text_row(quick: bool) -> dict:
    """The LoRA text task's row, as `benchmarks.finetune` measures it (ours, the better TF-IDF + logistic regression,
    a head on the frozen encoder, one worker alone; accuracy on pydocs' held-out split)."""
    from benchmarks.finetune import lora_text_row  # torch's LoRA stack and the base model: loaded only when asked

    return lora_text_row(quick)


def main(argv: list[str] | None = None) -> dict:
    options = parse_arguments(argv)
    training = dataclasses.replace(
        TABLE_TRAINING, hidden=tuple(int(size) for size in options.hidden.split(",")), lr=options.lr,
        batch_size=options.batch_size, epochs=options.default_epochs, min_steps=options.min_steps,
        round_steps=options.round_steps, schedule=options.schedule,
        weight_decay=options.weight_decay, outer_lr=options.outer_lr, outer_momentum=options.outer_momentum)
    began = time.perf_counter()
    chosen = [TABLES[name] for name in options.tables.split(",")]
    skipped = [table.name for table in chosen if table.task not in SUPPORTED_TASKS]
    tables = {}
    with tempfile.TemporaryDirectory(prefix="trolly-quality-") as directory:
        for table in chosen:
            if table.task in SUPPORTED_TASKS:
                tables[table.name] = measure_table(table, QUICK_ROWS if options.quick else FULL_ROWS, training,
                                                   options.epochs, pathlib.Path(directory))
                print(json.dumps({table.name: tables[table.name]}), flush=True)
    text = text_row(options.quick) if options.text else None
    gaps = [figures["gap"] for figures in tables.values() if figures["metric"] != "r2"]
    regression_gaps = [figures["gap"] for figures in tables.values() if figures["metric"] == "r2"]
    result = {"benchmark": "quality", "quick": options.quick, "workers": WORKERS, "codec": DATA_CODEC,
              "training": {**dataclasses.asdict(training), "epochs_override": options.epochs},
              "tables": tables, "skipped": skipped,
              "worst_gap": min(gaps) if gaps else None,
              "worst_gap_at_least_target": bool(gaps) and min(gaps) >= TARGET_GAP,
              "worst_regression_gap": min(regression_gaps) if regression_gaps else None,
              "text": text, "text_gap": None if text is None else round(text["ours"] - max(text["baseline"],
                                                                                         text["head"]), 4),
              "seconds": round(time.perf_counter() - began, 1)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
