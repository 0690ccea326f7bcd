"""A pinned base model read from the files of its installed package: frozen weights and tokenizer, offline.

A `lora-text` spec names its base by package, version and weights hash (`trolly.chain.market.base_models`). The
weights are never downloaded or exchanged: every worker and verifier loads them from its own installed copy of
the package (`importlib.resources`), after checking the version and the sha256 of the weights file, so all of
them start from the same bytes. A process without the package as pinned raises `BaseModelMissing`, before it
joins the task (`compute/worker/service.py`) or replays it (`verifier/service.py`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.resources
import pathlib

import torch

from trolly.chain.market.base_models import BASE_MODELS, BaseModel

from ..errors import BaseModelMissing

HASH_CHUNK = 1 << 20


def pinned_base(package: str, version: str) -> BaseModel:
    """The chain's record of a pinned base model (`BaseModelMissing` for one the chain does not pin)."""
    try:
        return BASE_MODELS[(package, version)]
    except KeyError:
        raise BaseModelMissing(f"{package}=={version} is not a pinned base model") from None


@functools.lru_cache(maxsize=None)
def base_model_directory(base: BaseModel) -> pathlib.Path:
    """The installed package's model directory, its version and weights hash checked (once per process)."""
    try:
        installed = importlib.metadata.version(base.package)
    except importlib.metadata.PackageNotFoundError:
        raise BaseModelMissing(f"the base model package {base.package}=={base.version} is not installed "
                               f"(pip install {base.package}=={base.version})") from None
    if installed != base.version:
        raise BaseModelMissing(f"the base model package {base.package} is installed at {installed}, "
                               f"the task pins {base.version}")
    directory = pathlib.Path(str(importlib.resources.files(base.module) / base.directory))
    weights = directory / "model.safetensors"
    digest = hashlib.sha256()
    try:
        with open(weights, "rb") as file:
            while chunk := file.read(HASH_CHUNK):
                digest.update(chunk)
    except OSError as error:
        raise BaseModelMissing(f"the weights of {base.package}=={base.version} cannot be read: {error}") from None
    if digest.hexdigest() != base.weights_sha256:
        raise BaseModelMissing(f"the installed weights of {base.package}=={base.version} do not match the pinned hash")
    return directory


@functools.lru_cache(maxsize=4)
def base_weights(base: BaseModel) -> dict[str, torch.Tensor]:
    """The frozen weights by name, as the package stores them (shared by every model this process builds: they
    are never written to)."""
    from safetensors.torch import load_file

    return load_file(str(base_model_directory(base) / "model.safetensors"))


def base_tokenizer(base: BaseModel, context: int):
    """The package's own tokenizer (the `tokenizers` library, from its `tokenizer.json`), cutting and padding
    every text to `context` tokens (pad id 0)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(base_model_directory(base) / "tokenizer.json"))
    tokenizer.enable_truncation(context)
    tokenizer.enable_padding(length=context, pad_id=0)
    return tokenizer


def require_base_model(model_config) -> None:
    """Raise `BaseModelMissing` unless the base model a spec's model config names (`base`, if any) is installed
    here as pinned: checked by a worker before it joins and by a verifier before it fetches anything."""
    base = model_config.get("base")
    if base is not None:
        base_model_directory(pinned_base(base["package"], base["version"]))
