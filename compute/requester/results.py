"""A task's result back: the final weights by the chain's hash, checked, written as safetensors, evaluated.

`fetch_result` reads the task and its spec through the wallet's typed market views, downloads the blob the
chain names as the task's `final_weights_hash` from any member's blob URL (the client checks every byte
against that hash), checks the spec's bytes against the chain's spec hash and the weights against the model
the spec describes (every tensor's name and shape), and fetches the dataset manifest for the label names.
`write_result` writes `model.safetensors`, `spec.json` and `labels.json` (and the files `model_files.py`
adds: the preprocessing, an ONNX model) under a temporary name and renames the directory into place; for a LoRA task the verified weights (the adapters and the head) go to
`adapter.safetensors` and `model.safetensors` holds the whole model with the adapters merged into the pinned
base model's projections (`LoraTextClassifier.merged_state_dict`), which the safetensors library alone loads. `evaluate_result` runs the weights on the held-out split of the task's dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import shutil
import tempfile

import torch

from trolly.chain.market.datasets import REGRESSION, dataset_shape, is_text_classification
from trolly.chain.market.records import FINISHED
from trolly.wallet.market_views import TaskView
from trolly.wallet.files import install_directory, write_atomically
from trolly.wallet.proven_views import prove_spec, prove_task
from trolly.wallet.rpc import AsyncRpcClient

from ..blobs import AddressPolicy, BlobAddressRefused, BlobClient, BlobError
from ..checkpoints import decode_weights
from ..data import Dataset
from ..data.fetch import DatasetFetcher
from ..data.preprocessing import Target
from ..errors import ComputeError
from ..models import DataShape, build_model
from ..spec import TaskSpec, parse_spec
from ..training import evaluate
from .baseline import beside_baseline
from .metrics import evaluate_regression

MODEL_FILE = "model.safetensors"
ADAPTER_FILE = "adapter.safetensors"
SPEC_FILE = "spec.json"
LABELS_FILE = "labels.json"


class ResultError(ComputeError):
    """A task's result cannot be had: not final yet, not served, or not what the chain says it is."""


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """A task's verified final weights, the spec they were trained under and the dataset's label names."""

    task_id: int
    final_weights_hash: str
    spec_bytes: bytes
    spec: TaskSpec
    shape: DataShape
    weights: dict[str, torch.Tensor]
    labels: tuple[str, ...] | None
    urls: tuple[str, ...]

    def model(self) -> torch.nn.Module:
        model = build_model(self.spec.model.arch, self.spec.model.config, self.shape, self.spec.training.seed)
        model.load_state_dict(self.weights)
        return model

    def summary(self) -> dict:
        return {"task_id": self.task_id, "final_weights_hash": self.final_weights_hash,
                "spec_hash": hashlib.sha256(self.spec_bytes).hexdigest(), "arch": self.spec.model.arch,
                "input_size": self.shape.input_size, "num_classes": self.shape.num_classes,
                "parameters": sum(t.numel() for t in self.weights.values()),
                "labels": None if self.labels is None else list(self.labels)}


def spec_shape(spec: TaskSpec) -> DataShape:
    """The shape the spec's dataset gives the model (declared for packed data, fixed for bundled data)."""
    dataset = {"name": spec.dataset.name}
    if spec.dataset.packed:
        dataset.update(input_size=spec.dataset.input_size, num_classes=spec.dataset.num_classes)
        if spec.dataset.context:
            dataset.update(context=spec.dataset.context)
        dataset.update(task=spec.dataset.task)
    input_size, num_classes, context = dataset_shape(dataset)
    kind = ("text-classification" if is_text_classification(spec.dataset.name, context)
            else "text" if context else REGRESSION if spec.dataset.task == REGRESSION else "classification")
    return DataShape(kind, input_size, num_classes, context)


def member_urls(view: TaskView) -> list[str]:
    """Where the members' blobs are fetched from (own URLs or relays), those that finished the task first (a
    dropped worker may have gone away)."""
    return [m.fetch_url for m in sorted(view.members, key=lambda m: m.status != FINISHED) if m.fetch_url]


async def fetch_result(client: AsyncRpcClient, task_id: int, addresses: AddressPolicy) -> TaskResult:
    view = (await prove_task(client, task_id)).view  # the final weights hash the blob is checked against: proven
    if not view.final_weights_hash:
        raise ResultError(f"task {task_id} has no verified final weights yet (it is {view.status}); "
                          f"fetch it once it has completed")
    spec_view, _ = await prove_spec(client, task_id)
    spec_bytes = spec_view.spec_bytes
    if hashlib.sha256(spec_bytes).hexdigest() != view.spec_hash:
        raise ResultError(f"the node's spec of task {task_id} does not hash to the task's spec hash")
    spec = parse_spec(spec_bytes)
    shape = spec_shape(spec)
    urls = member_urls(view)
    if not urls:
        raise ResultError(f"no member of task {task_id} names a blob URL to fetch the final weights from")
    try:
        async with BlobClient(urls, address_policy=addresses) as blobs:
            weights_bytes = await blobs.fetch(view.final_weights_hash)  # hash-checked by the client
    except BlobError as error:
        raise unfetched(f"the final weights {view.final_weights_hash[:16]}", error) from None
    weights = decode_weights(weights_bytes)
    result = TaskResult(task_id, view.final_weights_hash, spec_bytes, spec, shape, weights,
                        await _labels(spec, urls, addresses), tuple(urls))
    try:
        result.model()
    except RuntimeError as error:  # load_state_dict: a missing or unexpected tensor, or a wrong shape
        raise ResultError(f"the final weights do not fit the spec's {spec.model.arch}: {error}") from None
    return result


async def _labels(spec: TaskSpec, urls: list[str], addresses: AddressPolicy) -> tuple[str, ...] | None:
    """The packed dataset's label names from its manifest; digits' are its digits; a text corpus has none."""
    if not spec.dataset.packed:
        return tuple(str(i) for i in range(10)) if spec.dataset.name == "digits" else None
    try:
        manifest = await DatasetFetcher.for_task(spec, list(spec.dataset.urls) + urls, addresses).manifest()
        return tuple(str(label) for label in manifest["labels"])
    except (ComputeError, KeyError, TypeError) as error:
        raise unfetched(f"the dataset manifest {spec.dataset.manifest_hash[:16]} (for the label names)", error) from None


async def fetch_dataset_of(result: TaskResult, addresses: AddressPolicy) -> Dataset:
    """The task's dataset from the spec's URLs and its members' (who keep the data they trained on)."""
    try:
        return await DatasetFetcher.for_task(result.spec, list(result.spec.dataset.urls) + list(result.urls),
                                             addresses).in_memory()
    except BlobError as error:
        raise unfetched(f"the dataset {result.spec.dataset.manifest_hash[:16]}", error) from None


def unfetched(what: str, error: Exception) -> ResultError:
    """`what` could not be fetched; where the addresses were refused, how a requester allows its own network's."""
    hint = ("; where the workers are on your own network, as on a localnet, allow private addresses "
            "(--allow-private-addresses)") if isinstance(error, BlobAddressRefused) else ""
    return ResultError(f"{what} could not be fetched: {error}{hint}")


def write_result(result: TaskResult, directory: pathlib.Path, extra: dict[str, bytes] | None = None) -> list[str]:
    """Write the result's files, and the `extra` files by name (`model_files.py`: the preprocessing, an ONNX
    model), into `directory` (new, or empty) all at once; returns their names."""
    from safetensors.torch import save_file

    directory = pathlib.Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ResultError(f"{directory} already exists and is not empty: fetch into a new directory")
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = pathlib.Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".partial", dir=directory.parent))
    try:
        metadata = {key: str(value) for key, value in result.summary().items() if key != "labels"}
        trained = {name: tensor.contiguous() for name, tensor in result.weights.items()}
        files = [MODEL_FILE, SPEC_FILE, LABELS_FILE]
        model = result.model()
        if hasattr(model, "merged_state_dict"):  # LoRA: the verified adapters, and the model they make
            save_file(trained, temporary / ADAPTER_FILE, metadata=metadata)
            merged = {name: tensor.contiguous() for name, tensor in model.merged_state_dict().items()}
            save_file(merged, temporary / MODEL_FILE, metadata=metadata)
            files.insert(0, ADAPTER_FILE)
        else:
            save_file(trained, temporary / MODEL_FILE, metadata=metadata)
        write_atomically(temporary / SPEC_FILE, result.spec_bytes)
        labels = None if result.labels is None else list(result.labels)
        write_atomically(temporary / LABELS_FILE, (json.dumps(labels) + "\n").encode())
        for name, data in (extra or {}).items():
            write_atomically(temporary / name, data)
            files.append(name)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    install_directory(temporary, directory)
    return files


def evaluate_result(result: TaskResult, dataset: Dataset, target: Target | None = None) -> dict:
    """Held-out loss and accuracy of the result's weights on `dataset`, which must be the spec's; for regression
    the loss (mean squared error on the standardized target) beside R^2, MAE and RMSE in the units of `target`
    (`metrics.py`); and the score beside the baseline fitted here on the same split (`baseline.beside_baseline`:
    R^2 of a ridge regression for regression)."""
    if dataset.manifest_hash != result.spec.dataset.manifest_hash:
        raise ResultError(f"the dataset {dataset.manifest_hash[:16]} is not the task's "
                          f"({result.spec.dataset.manifest_hash[:16]})")
    model = result.model()
    loss, accuracy = evaluate(model, dataset)
    scores = {"accuracy": accuracy} if accuracy is not None else evaluate_regression(model, dataset, target)
    return {"task_id": result.task_id, "final_weights_hash": result.final_weights_hash, "loss": loss, **scores,
            "test_samples": int(dataset.test_inputs.shape[0]), **beside_baseline(model, dataset, accuracy)}
