"""`task submit --data` sizes the task to the data: rounds and inner steps from epochs over the train split
(`compute/requester/budget.py`), `--epochs` to set them, the plan's cost per epoch, and every budget the chain
would refuse refused first, with what to ask for instead."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from requester_helpers import iris_like, write_csv
from trolly.chain.market.params import MarketParams
from trolly.chain.market.spec import validate_spec
from trolly.compute.errors import SpecError
from trolly.compute.requester.budget import (CHAIN_BOUNDS, TABLE_TRAINING, Budget, budget_for, max_inner_steps,
                                             table_spec)
from trolly.compute.requester.cli import prepare_data_submission
from trolly.compute.spec import example_spec, parse_spec
from trolly.wallet.cli import cli
from trolly.wallet.errors import WalletError
from trolly.wallet.tasks import TaskPlan

URLS = ("http://127.0.0.1:9999",)
BATCH = TABLE_TRAINING.batch_size


def fits_the_chain(budget: Budget) -> bool:
    return (budget.rounds <= CHAIN_BOUNDS.max_rounds
            and math.ceil(budget.inner_steps / 10) <= CHAIN_BOUNDS.max_segments_per_round)


@pytest.mark.parametrize("rows", [150, 400, 5_000, 100_000, 1_000_000])
def test_the_default_budget_grows_with_the_rows_and_fits_the_chain(rows):
    budget = budget_for(rows, BATCH)
    assert fits_the_chain(budget) and budget.rounds >= min(TABLE_TRAINING.min_rounds, budget.steps)
    # the default epochs, and at least min_steps steps (a small table's many passes), rounded up to whole rounds
    wanted = max(TABLE_TRAINING.min_steps, math.ceil(TABLE_TRAINING.epochs * rows / BATCH))
    assert wanted <= budget.steps < wanted + budget.rounds
    spec = table_spec("ab" * 32, "mlp", {"hidden": [128]}, budget, "int8")
    spec["dataset"] = {"name": "packed", "manifest_hash": "ab" * 32, "urls": list(URLS), "input_size": 4,
                       "num_classes": 3}
    raw = json.dumps(spec).encode()
    assert validate_spec(raw, budget.rounds).rounds == budget.rounds and parse_spec(raw).training.inner_steps


def test_a_small_table_gets_many_epochs_and_a_large_one_few():
    small, large = budget_for(120, BATCH), budget_for(1_000_000, BATCH)
    assert small.steps >= TABLE_TRAINING.min_steps and small.epochs > 3 * large.epochs
    assert large.epochs == pytest.approx(TABLE_TRAINING.epochs, rel=1e-3)
    assert large.steps > 100 * small.steps


def test_epochs_set_the_steps_and_rounds_spread_them():
    budget = budget_for(1_000, 32, epochs=5)
    assert budget.steps >= math.ceil(5 * 1_000 / 32) and 5 <= budget.epochs < 5 + budget.rounds * 32 / 1_000
    over_three = budget_for(1_000, 32, epochs=5, rounds=3)
    assert over_three.rounds == 3 and over_three.inner_steps == math.ceil(math.ceil(5 * 1_000 / 32) / 3)
    assert budget_for(1_000, 32, epochs=0.01).steps == 1  # a sliver of an epoch is one step of one round


@pytest.mark.parametrize("epochs", [0, -1, float("nan"), float("inf")])
def test_epochs_that_are_not_a_positive_number_are_refused(epochs):
    with pytest.raises(SpecError, match="positive number"):
        budget_for(1_000, 32, epochs=epochs)


def test_an_epoch_budget_over_the_chains_bounds_is_refused_with_the_most_it_allows():
    most = CHAIN_BOUNDS.max_rounds * max_inner_steps() * 32 / 1_000_000
    budget_for(1_000_000, 32, epochs=most * 0.99)  # fits
    with pytest.raises(SpecError, match=r"more than the chain allows .* ask for at most 320 epochs"):
        budget_for(1_000_000, 32, epochs=most * 2)
    with pytest.raises(SpecError, match=r"ask for at most 0\.32 epochs or more rounds"):
        budget_for(1_000_000, 32, epochs=3, rounds=1)
    with pytest.raises(SpecError, match="max_rounds"):
        budget_for(1_000, 32, rounds=CHAIN_BOUNDS.max_rounds + 1)


def test_submit_data_sizes_the_spec_and_epochs_set_it(tmp_path):
    source = write_csv(tmp_path / "data.csv", iris_like(200))
    by_default = prepare_data_submission(str(source), None, "mlp", None, URLS, "127.0.0.1:0", None)
    training = parse_spec(by_default.spec).training
    expected = budget_for(by_default.packed.train_samples, BATCH)
    assert (training.rounds, training.inner_steps, training.batch_size) == (expected.rounds, expected.inner_steps,
                                                                            BATCH)
    assert training.inner_optimizer.lr == TABLE_TRAINING.lr
    assert by_default.budget == expected

    chosen = prepare_data_submission(str(source), None, "mlp", 4, URLS, "127.0.0.1:0", None, epochs=20)
    training = parse_spec(chosen.spec).training
    assert training.rounds == 4 and chosen.budget.epochs >= 20
    assert training.inner_steps == math.ceil(math.ceil(20 * chosen.packed.train_samples / BATCH) / 4)

    spec_file = tmp_path / "spec.json"  # a spec file keeps its own batch size; --epochs sets its steps
    spec_file.write_text(json.dumps(example_spec("0" * 64)))
    own = prepare_data_submission(str(source), str(spec_file), None, None, URLS, "127.0.0.1:0", None, epochs=2)
    training = parse_spec(own.spec).training
    assert training.batch_size == 32 and own.budget.epochs >= 2
    assert training.rounds * training.inner_steps == budget_for(own.packed.train_samples, 32, 2).steps
    unchanged = prepare_data_submission(str(source), str(spec_file), None, 3, URLS, "127.0.0.1:0", None)
    assert (parse_spec(unchanged.spec).training.rounds, parse_spec(unchanged.spec).training.inner_steps) == (3, 50)


def test_submit_data_refuses_bad_epochs_before_serving_or_signing(tmp_path):
    source = write_csv(tmp_path / "data.csv", iris_like())
    for epochs, words in ((0, "--epochs must be a positive number"), (1e9, "ask for at most")):
        with pytest.raises(WalletError, match=words):
            prepare_data_submission(str(source), None, "mlp", None, URLS, "127.0.0.1:0", None, epochs=epochs)
    result = CliRunner().invoke(cli, ["task", "submit", "--data", str(source), "--data-url", URLS[0], "--epochs", "0",
                                      "--budget", "50trl", "--from", "requester", "--yes"],
                                env={"TROLLY_WALLET_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0 and "--epochs must be a positive number" in result.output, result.output
    assert not (tmp_path / "home").exists()  # no key was read, nothing signed


def test_the_plan_shows_the_epochs_and_the_cost_of_one(tmp_path):
    source = write_csv(tmp_path / "data.csv", iris_like(200))
    prepared = prepare_data_submission(str(source), None, "mlp", None, URLS, "127.0.0.1:0", None, epochs=10)
    budget = prepared.budget
    plan = TaskPlan(rounds=budget.rounds, reward_per_round=1_000_000, cost=budget.rounds * 1_050_000,
                    budget=50_000_000, refund_if_all_paid=0, collateral=1, minimum_collateral=1, segments_per_round=1,
                    workers=1, samples_per_worker=1)
    rows = dict(prepared.plan_rows(plan))
    assert rows["epochs"].startswith(f"{budget.epochs:.3g} epochs ({budget.rounds} rounds x {budget.inner_steps} ")
    per_epoch = plan.cost * budget.train_samples // (budget.steps * budget.batch_size)
    assert rows["cost per epoch"].endswith(f"({per_epoch}utrl)") and per_epoch * budget.epochs <= plan.cost


def test_submit_data_prints_the_epochs_and_their_cost_in_the_plan(tmp_path, monkeypatch):
    async def params(client):
        return MarketParams()

    monkeypatch.setattr("trolly.wallet.requester.get_market_params", params)
    source = write_csv(tmp_path / "data.csv", iris_like(200))
    result = CliRunner().invoke(cli, ["task", "submit", "--data", str(source), "--data-url", URLS[0], "--epochs", "8",
                                      "--budget", "50trl", "--from", "requester", "--yes", "--generate-only"],
                                env={"TROLLY_WALLET_HOME": str(tmp_path / "home")})
    assert "epochs" in result.output and "cost per epoch" in result.output, result.output
