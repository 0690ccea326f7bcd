"""The model a requester could fit alone in seconds, on the same split and features as the task: what a network's
model is scored beside (`task eval`, the console's task page, `benchmarks.quality`).

    fit_baseline(dataset) -> {"metric", "baseline", "baseline_name", "seconds"}

- features (a packed table, already preprocessed as the pack fixed it from its train split; images; hashed word
  counts): a logistic regression on the train split;
- texts packed for lora-text (token ids of the base model's tokenizer): the ids as a bag of words, weighted by
  TF-IDF (the TF-IDF of the tokenized text), then a logistic regression;
- a regression target (a dataset of kind "regression"): a ridge regression, scored by R^2;
- a corpus of next-token windows has none (None).

A classifier's score is accuracy on the held-out split, or balanced accuracy (the mean of the per-label recalls)
where the train split's labels are imbalanced, one holding under `IMBALANCE` times the examples of another:
there, predicting the common label is right most of the time and learns nothing. `held_out_score` scores a network's
model with the same metric. A train split of more than `MAX_ROWS` rows is fitted on a fixed sample of them, so
the baseline stays a matter of seconds on a million rows.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..data import Dataset

IMBALANCE = 0.5
"""Labels are imbalanced when the rarest holds under this share of the most common one's train examples."""
MAX_ROWS = 200_000
"""The most train rows the baseline is fitted on (a fixed sample beyond)."""
MAX_ITERATIONS = 1_000
PAD_TOKEN = 0
REGRESSION = "regression"


def metric_of(dataset: Dataset) -> str:
    """"r2" for a regression target, "balanced_accuracy" for imbalanced train labels, else "accuracy"."""
    if dataset.shape.kind == REGRESSION:
        return "r2"
    counts = np.bincount(dataset.train_targets.reshape(-1).numpy(), minlength=dataset.shape.num_classes)
    present = counts[counts > 0]
    return "balanced_accuracy" if present.min() < IMBALANCE * present.max() else "accuracy"


def score(predicted: np.ndarray, targets: np.ndarray, metric: str) -> float:
    """`metric` ("accuracy" or "balanced_accuracy") of `predicted` labels against `targets`, or "r2" (the share of
    the targets' variance the predicted values explain)."""
    predicted, targets = np.asarray(predicted).reshape(-1), np.asarray(targets).reshape(-1)
    if metric == "r2":
        residual = np.sum((targets - predicted) ** 2)
        return float(1.0 - residual / np.sum((targets - targets.mean()) ** 2))
    if metric == "accuracy":
        return float(np.mean(predicted == targets))
    if metric == "balanced_accuracy":
        return float(np.mean([np.mean(predicted[targets == label] == label) for label in np.unique(targets)]))
    raise ValueError(f"unknown metric {metric!r}")


@torch.no_grad()
def held_out_score(model: torch.nn.Module, dataset: Dataset, metric: str, batch_size: int = 512) -> float:
    """`metric` of `model`'s predictions on the dataset's held-out split."""
    was_training = model.training
    model.eval()
    outputs = torch.cat([model(dataset.test_inputs[begin:begin + batch_size])
                         for begin in range(0, len(dataset.test_inputs), batch_size)])
    predicted = outputs.reshape(-1) if metric == "r2" else outputs.argmax(dim=-1)
    model.train(was_training)
    return score(predicted.numpy(), dataset.test_targets.numpy(), metric)


def fit_baseline(dataset: Dataset) -> dict | None:
    """The baseline's held-out score: {"metric", "baseline", "baseline_name", "seconds"}; None for a corpus of
    next-token windows, which no classifier scores."""
    if dataset.shape.kind == "text":
        return None
    from sklearn.linear_model import LogisticRegression, Ridge

    began = time.perf_counter()
    metric = metric_of(dataset)
    rows = _sample(dataset.train_size)
    if dataset.shape.kind == "text-classification":
        name, (train, test) = "TF-IDF + logistic regression", _tf_idf(dataset, rows)
    else:
        name = "ridge regression" if metric == "r2" else "logistic regression"
        train = dataset.train_inputs[rows].reshape(len(rows), -1).numpy()
        test = dataset.test_inputs.reshape(len(dataset.test_inputs), -1).numpy()
    model = Ridge() if metric == "r2" else LogisticRegression(max_iter=MAX_ITERATIONS)
    fitted = model.fit(train, dataset.train_targets[rows].numpy())
    value = score(fitted.predict(test), dataset.test_targets.numpy(), metric)
    return {"metric": metric, "baseline": value, "baseline_name": name,
            "seconds": round(time.perf_counter() - began, 3)}


def _sample(train_size: int) -> np.ndarray:
    """Every train row, or a fixed sample of `MAX_ROWS` of them."""
    if train_size <= MAX_ROWS:
        return np.arange(train_size)
    return np.sort(np.random.Generator(np.random.PCG64(0)).choice(train_size, MAX_ROWS, replace=False))


def _tf_idf(dataset: Dataset, rows: np.ndarray):
    """The train rows' and the held-out split's token ids as TF-IDF weighted bags of words (pads left out)."""
    from scipy.sparse import csr_matrix
    from sklearn.feature_extraction.text import TfidfTransformer

    vocabulary = int(max(dataset.train_inputs.max(), dataset.test_inputs.max())) + 1

    def counts(tokens: torch.Tensor):
        ids = tokens.numpy().astype(np.int64)
        row_of = np.repeat(np.arange(len(ids)), ids.shape[1])
        kept = ids.reshape(-1) != PAD_TOKEN
        return csr_matrix((np.ones(int(kept.sum())), (row_of[kept], ids.reshape(-1)[kept])),
                          shape=(len(ids), vocabulary))

    weighting = TfidfTransformer().fit(counts(dataset.train_inputs[rows]))
    return weighting.transform(counts(dataset.train_inputs[rows])), weighting.transform(counts(dataset.test_inputs))


def beside_baseline(model: torch.nn.Module, dataset: Dataset, accuracy: float | None = None) -> dict:
    """`model`'s held-out score beside the baseline's, and whether it beat it: {"metric", "score", "baseline",
    "baseline_name", "baseline_seconds", "beats_baseline", "verdict"}; {} where there is no baseline. `accuracy`,
    the model's held-out accuracy where the caller has it, saves running the model again."""
    baseline = fit_baseline(dataset)
    if baseline is None:
        return {}
    metric = baseline["metric"]
    ours = accuracy if metric == "accuracy" and accuracy is not None else held_out_score(model, dataset, metric)
    difference = ours - baseline["baseline"]
    verdict = (f"the network's model beats the {baseline['baseline_name']} by {difference:.4f}" if difference > 0
               else f"the network's model ties the {baseline['baseline_name']}" if difference == 0
               else f"the network's model is {-difference:.4f} below the {baseline['baseline_name']}")
    return {"metric": metric, "score": ours, "baseline": baseline["baseline"],
            "baseline_name": baseline["baseline_name"], "baseline_seconds": baseline["seconds"],
            "beats_baseline": difference > 0, "verdict": verdict}
