"""benchmarks.finetune's yardsticks: the TF-IDF baseline reads the model's own held-out split, the head on the
frozen encoder follows the spec's lr schedule, and the target compares ours with the better of the two."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks import finetune
from lora_helpers import pydocs


def test_the_tf_idf_baseline_scores_the_held_out_split_the_model_is_scored_on():
    """Both readings of the docstrings learn their package, far above the most common one's share (0.29)."""
    accuracies = finetune.tf_idf_accuracies(pydocs())
    assert set(accuracies) == {"tokens", "texts"}
    assert all(0.8 < value <= 1.0 for value in accuracies.values())


def test_the_tf_idf_baseline_refuses_a_dataset_whose_held_out_labels_are_not_the_docstrings():
    """A baseline scored against other labels than the model's would compare two different tests."""
    dataset = pydocs()
    shuffled = dataclasses.replace(dataset, test_targets=torch.roll(dataset.test_targets, 1))
    with pytest.raises(RuntimeError, match="held-out split"):
        finetune.tf_idf_accuracies(shuffled)


def test_the_head_on_the_frozen_encoder_learns_with_the_spec_schedule():
    settings = {"rounds": 1, "inner_steps": 10, "batch_size": 8, "rank": 4}
    spec = finetune.alone_spec(settings)
    assert spec.training.inner_steps == finetune.WORKERS * 10 and spec.training.inner_optimizer.schedule.name == "cosine"
    dataset = pydocs()
    assert finetune.head_alone_accuracy(spec, dataset, finetune.held_out(dataset)) > 0.35


@pytest.mark.parametrize("ours, baseline, head, meets", [
    (0.90, 0.905, 0.88, True), (0.89, 0.905, 0.88, False), (0.90, 0.85, 0.92, False), (0.93, 0.90, 0.92, True)])
def test_the_target_is_the_better_of_the_baseline_and_the_head_less_a_hundredth(ours, baseline, head, meets):
    row = {"ours": ours, "baseline": baseline, "head": head, "alone": 0.5, "metric": "accuracy"}
    assert finetune.meets_target(row) is meets
