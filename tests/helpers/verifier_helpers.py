"""Shared pieces of the verifier tests: a tiny task on digits, rounds built by the cheat registry, claims."""

from __future__ import annotations

import functools

import torch

from trolly.compute.checkpoints import weights_hash
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.determinism import DeterminismProfile, current_instruction_set
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.compute.training import Trainer
from trolly.compute.cheats import CheatContext, get_cheat, honest_round
from trolly.verifier.checkpoint_sources import MemorySource
from trolly.verifier.segment_check import SegmentClaim

from cheat_helpers import stand_in_weights

WORKER_ADDRESS = "trolly1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5mjg9m2"  # encode_address(bytes(range(1, 21)))


@functools.lru_cache(maxsize=1)
def digits():
    return dataset_from_blobs(build_dataset("digits"))


def tiny_spec_document(manifest_hash: str, **training) -> dict:
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}})
    document["training"].update({"inner_steps": 12, "checkpoint_every": 5, "batch_size": 8, **training})
    return document


def tiny_spec(**training):
    return spec_from_dict(tiny_spec_document(digits().manifest_hash, **training))


def own_profile() -> str:
    return DeterminismProfile(threads=1).id


def foreign_profile() -> str:
    other = "default" if current_instruction_set() != "default" else "avx2"
    return f"torch-{torch.__version__}/threads-1/isa-{other}/deterministic-ftz"


def round_weights(spec, round_index: int):
    """Start weights for round 0 (W_0) and a perturbed stand-in for later rounds, on digits."""
    return stand_in_weights(spec, digits(), round_index)


def play(strategy: str, context: CheatContext):
    """The round played by the named cheat, or honestly ("honest": the baseline, not a registered cheat)."""
    return honest_round(context) if strategy == "honest" else get_cheat(strategy).play(context)


def build_round(spec, cheat: str = "honest", *, worker: int = 1, round_index: int = 1, faked=frozenset({1}),
                trainer: Trainer | None = None):
    """(CheatedRound, PublishedRound) of one worker-round played by the named strategy."""
    trainer = trainer or Trainer(spec, digits())
    steps = spec.training.inner_steps

    def honest(worker_index, round_number):
        return honest_round(CheatContext(trainer, round_weights(spec, round_number), worker_index, round_number,
                                                steps, frozenset(), torch.Generator().manual_seed(3)))

    context = CheatContext(trainer, round_weights(spec, round_index), worker, round_index, steps, frozenset(faked),
                           torch.Generator().manual_seed(11),
                           other_worker_round=lambda: honest(worker + 1, round_index),
                           earlier_round=lambda: honest(worker, max(0, round_index - 1)))
    cheated = play(cheat, context)
    return cheated, cheated.publish()


def claim_for(cheated, published, segment: int, profile: str | None = None, *, worker: int = 1, round_index: int = 1,
              task_id: int = 1, worker_address: str = WORKER_ADDRESS, blob_url: str = "") -> SegmentClaim:
    return SegmentClaim(task_id=task_id, round=round_index, worker=worker_address, worker_index=worker, segment=segment,
                        checkpoint_root=published.checkpoint_root, num_checkpoints=len(published.listing),
                        steps=cheated.steps, samples_processed=cheated.samples_processed,
                        start_weights_hash=cheated.start_weights_hash, determinism_profile=profile or own_profile(),
                        blob_url=blob_url, update_hash=published.update_hash, residual_hash=published.residual_hash)


def expected_start(spec, round_index: int = 1) -> bytes:
    return weights_hash(round_weights(spec, round_index))


def source_of(published, task_id=1, round_index=1) -> MemorySource:
    """An in-memory blob source holding `published`'s listing and blobs for that round."""
    source = MemorySource()
    source.add_round(task_id, round_index, published.listing, published.blobs)
    return source
