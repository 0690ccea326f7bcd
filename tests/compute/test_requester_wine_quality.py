"""The point of preprocessing at pack time, measured: scikit-learn's wine table (13 numeric columns at raw
scales, one in the hundreds to thousands beside others near 0.1), packed as a requester packs it and trained
through the project's own training path at the default `task submit --data` spec, is no longer far below a
logistic regression fitted on a laptop. Fed raw, the same MLP learnt little in that budget (issue 34: 0.58 at
three rounds against the regression's 0.97 or more).
"""

from __future__ import annotations

import csv
import json

import numpy as np
from click.testing import CliRunner
from sklearn.datasets import load_wine
from sklearn.linear_model import LogisticRegression

from trolly.compute.data.packing import open_packed
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.requester.cli import default_spec
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer, evaluate, initial_weights, run_round
from trolly.wallet.cli import cli


def wine_csv(path):
    wine = load_wine()
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow([*wine.feature_names, "cultivar"])
        writer.writerows([*row, wine.target_names[target]] for row, target in zip(wine.data, wine.target))
    return path


def test_the_default_mlp_on_the_packed_wine_table_is_near_a_local_logistic_regression(tmp_path):
    result = CliRunner().invoke(cli, ["data", "pack", str(wine_csv(tmp_path / "wine.csv")), "-o",
                                      str(tmp_path / "wine"), "--public", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    packed = open_packed(tmp_path / "wine")
    dataset = packed.load()
    document = default_spec(packed, "mlp")
    document["dataset"] = packed.spec_dataset(["http://127.0.0.1:1"])
    spec = parse_spec(json.dumps(document))
    trainer = Trainer(spec, dataset)
    state = GlobalState.initial(initial_weights(spec, dataset.shape))
    for round_index in range(spec.training.rounds):  # one worker, the spec's rounds and inner steps
        done = run_round(trainer, state.weights, worker_index=0, round_index=round_index,
                         steps=spec.training.inner_steps)
        state = outer_step(state, [WorkerUpdate(0, done.samples_processed, done.pseudo_gradient)],
                           spec.training.outer_optimizer)
    trainer.model.load_state_dict(state.weights)
    loss, ours = evaluate(trainer.model, dataset)
    trainer.close()
    baseline = LogisticRegression(max_iter=1000).fit(dataset.train_inputs.numpy(), dataset.train_targets.numpy())
    theirs = float(np.mean(baseline.predict(dataset.test_inputs.numpy()) == dataset.test_targets.numpy()))
    print(f"wine, {spec.training.rounds} rounds x {spec.training.inner_steps} steps: ours {ours:.3f} "
          f"(loss {loss:.3f}), logistic regression {theirs:.3f}")
    assert ours >= theirs - 0.06 and loss < 0.5, (ours, loss, theirs)
