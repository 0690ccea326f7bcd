"""A requester's finished task on a packed table, made in process: the spec `task submit --data` builds, weights
trained on the task's own copy of the data (a short full-batch loop: enough to tell the classes apart, or to fit a
regression table's standardized target), as the
`TaskResult` `task fetch` would read from the chain. For the tests of what a fetched model answers."""

from __future__ import annotations

import numpy as np
import torch

from trolly.compute.models import build_model
from trolly.compute.requester.cli import prepare_data_submission
from trolly.compute.requester.results import TaskResult, spec_shape
from trolly.compute.spec import parse_spec


def finished_task(packed_directory, urls=("http://127.0.0.1:9999",), steps: int = 150):
    """The result of a task submitted on `packed_directory` with its data served at `urls`, and the dataset it
    trained on (for a private pack, the task's own re-encrypted copy)."""
    prepared = prepare_data_submission(str(packed_directory), None, None, 1, tuple(urls), "127.0.0.1:0", None)
    spec = parse_spec(prepared.spec)
    dataset = prepared.packed.load()
    shape = spec_shape(spec)
    model = build_model(spec.model.arch, spec.model.config, shape, spec.training.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    loss = (torch.nn.functional.cross_entropy if shape.kind != "regression"
            else lambda outputs, targets: torch.nn.functional.mse_loss(outputs.reshape(-1), targets))
    for _ in range(steps):
        optimizer.zero_grad()
        loss(model(dataset.train_inputs), dataset.train_targets).backward()
        optimizer.step()
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    result = TaskResult(1, "00" * 32, prepared.spec, spec, shape, weights, prepared.packed.labels, tuple(urls))
    return result, dataset


def people_csv(path, count: int = 80):
    """A table as people have them: an id, an income in the tens of thousands, a city (a column of words), an age
    with missing cells, and a plan (the label) that follows the income and the city."""
    generator = np.random.default_rng(3)
    cities = ["Paris", "Lyon", "Nice"]
    lines = ["customer_id,income,city,age,plan"]
    for row in range(count):
        city = cities[row % 3]
        income = float(generator.normal(60_000 if row % 2 else 30_000, 5_000))
        age = str(int(generator.integers(20, 70)))
        age = "" if row % 5 == 2 else "NA" if row % 7 == 3 else age
        plan = "premium" if income > 45_000 or city == "Nice" else "basic"
        lines.append(f"{9000 + row * 7},{income:.2f},{city},{age},{plan}")
    path.write_text("\n".join(lines) + "\n")
    return path
