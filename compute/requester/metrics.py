"""A regression result's held-out scores in the target's own units: R^2, MAE and RMSE.

The model is trained and verified on the target standardized with the train split's mean and scale (its loss,
the mean squared error, is in those units); a requester judges it in the column's own units. The model's
outputs on the held-out split and the held-out targets are both restored with the pack's `Target`
(`compute.data.preprocessing`), then compared: R^2 is 1 - (sum of squared errors) / (sum of squared deviations
of the held-out targets from their mean), the score a constant prediction of that mean would have at 0. R^2
does not depend on the units; MAE and RMSE do, and are reported in the target column's.

Without the target's statistics (a pack made before regression had them cannot be, but a hand-made manifest
could) the scores are given in standardized units, and say so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from ..blobs import AddressPolicy, BlobError
from ..data import Dataset
from ..data.fetch import DatasetFetcher
from ..data.packing import read_preprocessing
from ..data.preprocessing import Target
from ..errors import ComputeError
from ..spec import TaskSpec


@torch.no_grad()
def held_out_outputs(model: torch.nn.Module, dataset: Dataset, batch_size: int = 512) -> np.ndarray:
    """The model's one output per held-out sample, as float64."""
    was_training = model.training
    model.eval()
    outputs = [model(dataset.test_inputs[begin:begin + batch_size]).reshape(-1)
               for begin in range(0, len(dataset.test_inputs), batch_size)]
    model.train(was_training)
    return torch.cat(outputs).to(torch.float64).numpy() if outputs else np.zeros(0)


def regression_scores(predicted: np.ndarray, actual: np.ndarray) -> dict:
    """R^2, MAE and RMSE of `predicted` against `actual` (same units); R^2 is None when every actual value is
    the same (it has no deviation to explain)."""
    errors = np.asarray(predicted, dtype=np.float64) - np.asarray(actual, dtype=np.float64)
    spread = float(np.sum((actual - np.mean(actual)) ** 2))
    squared = float(np.sum(errors ** 2))
    return {"r2": 1.0 - squared / spread if spread > 0 else None, "mae": float(np.mean(np.abs(errors))),
            "rmse": math.sqrt(squared / len(errors))}


def evaluate_regression(model: torch.nn.Module, dataset: Dataset, target: Target | None) -> dict:
    """The held-out R^2, MAE and RMSE of `model` in the target's own units (`target`: the pack's
    standardization; None gives them in standardized units), and what those units are."""
    standardized = held_out_outputs(model, dataset)
    truth = dataset.test_targets.to(torch.float64).numpy()
    if target is None:
        return {**regression_scores(standardized, truth), "units": "standardized (the target's statistics are not "
                                                                   "at hand)"}
    return {**regression_scores(target.restore(standardized), target.restore(truth)), "units": target.column}


async def fetch_target(spec: TaskSpec, urls: Sequence[str], addresses: AddressPolicy) -> Target | None:
    """The target of a public pack's preprocessing, fetched beside its manifest from `urls` (None when it names
    none)."""
    try:
        manifest, data = await DatasetFetcher.for_task(spec, urls, addresses).preprocessing_blob()
    except BlobError as error:
        raise ComputeError(f"the dataset's preprocessing could not be fetched (for the target's units): {error}"
                           ) from None
    if data is None:
        return None
    preprocessing = read_preprocessing(manifest, lambda digest: data, None)
    return None if preprocessing is None else preprocessing.target
