"""The New task page's templates, and the data each trains on: an upload packed by the console, or the
template's bundled dataset, built locally (nothing is downloaded) and served by the console like an upload.

A template is a model and its training settings; `build_spec` puts the chosen data's `dataset` section into
it and checks the result with the chain's own rules (`validate_spec`) and the compute library's (`parse_spec`),
as `task submit --data` does, so a spec the chain or a worker would refuse is refused here, before paying.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import TYPE_CHECKING, Callable

from trolly.chain.errors import ChainError
from trolly.chain.market.spec import validate_spec
from trolly.compute.blobs import BlobStore
from trolly.compute.errors import ComputeError
from trolly.wallet.files import write_atomically

if TYPE_CHECKING:  # the compute library loads torch: imported where a spec is built or data loaded
    from trolly.compute.data import Dataset
    from trolly.compute.data.packing import PackedDataset

SMALL_TRAINING = {"inner_steps": 40, "batch_size": 32, "checkpoint_every": 10, "seed": 2026,
                  "inner_optimizer": {"name": "adamw", "lr": 0.005, "weight_decay": 0.0},
                  "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9}}
"""The small models' training: the localnet demo's digits settings (`localnet/demo_tasks.py`), which reach the
demo's accuracy floor in a few rounds."""
SMALL_CODEC = "int8"
"""Dense int8, as `task submit --data` uses for small models (`compute.requester.cli.DATA_CODEC`)."""


def _small(arch: str, config: dict) -> Callable[[str, dict, int], dict]:
    def build(manifest_hash: str, dataset: dict, rounds: int) -> dict:
        from trolly.compute.spec import example_spec

        return example_spec(manifest_hash, model={"arch": arch, "config": config}, dataset=dataset,
                            training={**SMALL_TRAINING, "rounds": rounds}, codec=SMALL_CODEC)
    return build


def _lora(manifest_hash: str, dataset: dict, rounds: int) -> dict:
    from trolly.compute.spec import lora_text_spec

    return lora_text_spec(manifest_hash, rank=4, batch_size=8, rounds=rounds, inner_steps=20, dataset=dataset)


@dataclasses.dataclass(frozen=True)
class Template:
    key: str
    title: str
    description: str
    accepts: tuple[str, ...]
    """The uploads it trains on (`data_kind`: `csv`, `jsonl`, `images` features, or `tokens`); empty: only its
    bundled dataset."""
    bundled: str
    """The bundled dataset it trains on when nothing is uploaded."""
    build: Callable[[str, dict, int], dict]
    rounds: int = 3

    def to_json(self) -> dict:
        return {"key": self.key, "title": self.title, "description": self.description, "accepts": list(self.accepts),
                "bundled": self.bundled, "rounds": self.rounds}


TEMPLATES = {template.key: template for template in (
    Template("digits-mlp", "Digits MLP (tables and text)",
             "A multi-layer perceptron for labelled rows: a CSV with a header (the label in the last column), a "
             "JSONL of {\"text\", \"label\"} lines (hashed word features), or images. Without an upload it learns "
             "the bundled 8x8 handwritten digits.",
             ("csv", "jsonl", "images"), "digits", _small("mlp", {"hidden": [128]})),
    Template("image-cnn", "Image CNN",
             "A small convolutional network for square grey images: a zip with one folder of images per class. "
             "Without an upload it learns the bundled 8x8 handwritten digits.",
             ("images",), "digits", _small("cnn", {})),
    Template("text-transformer", "Text transformer",
             "A small byte-level decoder-only transformer that learns to continue text, trained on the bundled "
             "Python source corpus (pycorpus); it does not take an upload.",
             (), "pycorpus", _small("transformer", {"layers": 1, "heads": 2, "width": 32})),
    Template("lora-text", "LoRA text classifier",
             "The pinned all-MiniLM-L6-v2 encoder fine-tuned with LoRA adapters and a head: a JSONL of "
             "{\"text\", \"label\"} lines, kept as the encoder's own token ids. Without an upload it learns the "
             "bundled standard-library docstrings labelled by package (pydocs).",
             ("tokens",), "pydocs", _lora, rounds=2),
)}


class SpecRefused(Exception):
    """The chosen template and data do not make a spec the chain and the workers accept; says why."""


@dataclasses.dataclass(frozen=True)
class TaskData:
    """The data a task trains on, in a blob store the console serves: a packed upload or a bundled dataset."""

    store_directory: pathlib.Path
    manifest_hash: str
    section: dict
    """The spec's `dataset` section without its URLs."""
    key: bytes | None
    description: str

    def spec_section(self, urls: list[str]) -> dict:
        return {**self.section, "urls": urls}

    def load(self) -> Dataset:
        from trolly.compute.data import load_dataset

        return load_dataset(self.manifest_hash, BlobStore(self.store_directory).get, self.key)


def packing_model(template_key: str) -> str:
    """The model an upload for `template_key` is packed for (`compute.data.packing.pack_file`): texts become
    token ids for the LoRA template, features for every other."""
    from trolly.compute.data.packing import LORA_TEXT

    return LORA_TEXT if template_key == "lora-text" else "mlp"


def data_kind(packed: PackedDataset) -> str:
    """What a pack holds, as a template's `accepts` names it."""
    return "tokens" if packed.context else packed.source_format


def uploaded(packed: PackedDataset, template: Template) -> TaskData:
    kind = data_kind(packed)
    if kind not in template.accepts:
        trains_on = (", ".join(template.accepts) + " uploads" if template.accepts
                     else f"its bundled {template.bundled}")
        raise SpecRefused(f"the {template.title} template does not train on {kind} data (it trains on {trains_on}): "
                          f"pick another template, or upload the file again with this one chosen")
    section = {key: value for key, value in packed.spec_dataset([]).items() if key != "urls"}
    return TaskData(packed.directory, packed.manifest_hash, section, packed.key,
                    f"your {packed.source_format} upload: {packed.train_samples} training and {packed.test_samples} "
                    f"held-out samples, " + (f"predicting {packed.target.column}" if packed.target is not None
                                             else f"{packed.num_classes} labels"))


def bundled(template: Template, directory: pathlib.Path) -> TaskData:
    """The template's bundled dataset, built into `directory/<name>` the first time (a pure function of the
    package: the same manifest hash on every machine)."""
    from trolly.compute.data import build_dataset
    from trolly.compute.data.fetch import keep_blobs

    folder = directory / template.bundled
    marker = folder / "manifest_hash"
    if not marker.exists():
        blobs = build_dataset(template.bundled)
        keep_blobs(BlobStore(folder), blobs)
        write_atomically(marker, blobs.manifest_hash.encode())  # written last: a folder with it is complete
    manifest_hash = marker.read_text().strip()
    return TaskData(folder, manifest_hash, {"name": template.bundled, "manifest_hash": manifest_hash}, None,
                    f"the bundled {template.bundled} dataset")


def build_spec(template: Template, data: TaskData, rounds: int, urls: list[str]) -> bytes:
    """The spec's bytes for `template` on `data` served at `urls`, checked as the chain and a worker check it."""
    from trolly.compute.models import make_config
    from trolly.compute.requester.results import spec_shape
    from trolly.compute.spec import parse_spec

    document = template.build(data.manifest_hash, data.spec_section(urls), rounds)
    spec = json.dumps(document, indent=2, sort_keys=True).encode()
    try:
        validate_spec(spec, rounds)
        parsed = parse_spec(spec)
        make_config(parsed.model.arch, parsed.model.config, spec_shape(parsed))  # the model fits the data's shape
    except (ChainError, ComputeError, ValueError) as error:
        raise SpecRefused(f"the {template.title} template does not fit this data: {error}") from None
    return spec


def local_dataset(packs: pathlib.Path, bundled_datasets: pathlib.Path, manifest_hash: str) -> Dataset | None:
    """The console's own copy of the dataset `manifest_hash` (an upload it packed, a bundled dataset it
    built), loaded and hash-checked; None when it has none."""
    from trolly.compute.data import load_dataset

    for folder in sorted(bundled_datasets.glob("*")):
        marker = folder / "manifest_hash"
        if marker.exists() and marker.read_text().strip() == manifest_hash:
            return load_dataset(manifest_hash, BlobStore(folder).get)
    copy = local_pack(packs, manifest_hash)
    return None if copy is None else copy.load()


def local_pack(packs: pathlib.Path, manifest_hash: str):
    """The console's own pack of the dataset `manifest_hash` (an upload it packed, or a task's re-encrypted copy
    of one, with its key), a `PackedDataset`; None when it has none."""
    from trolly.compute.data.packing import open_packed, task_copy

    for folder in sorted(packs.glob("*")):
        try:
            packed = open_packed(folder)
        except ComputeError:
            continue
        copy = task_copy(packed, manifest_hash)  # the pack, or a task's re-encrypted copy of it
        if copy is not None:
            return copy
    return None
