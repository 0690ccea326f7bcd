"""Every cheat class of the matrix is caught on a LoRA fine-tuning task as on the MLP: the verifier replays
the adapters' segments bit for bit (tests/verifier/test_verifier_segment_check.py is the MLP's matrix)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from trolly.compute.checkpoints import weights_hash
from trolly.compute.cheats import CHEATS, CheatContext, get_cheat, honest_round
from trolly.compute.training import Trainer, initial_weights
from trolly.verifier.checkpoint_sources import MemorySource
from trolly.verifier.segment_check import PASSED, Replayer, verify_segment

from lora_helpers import lora_spec, pydocs
from verifier_helpers import claim_for, own_profile

CHEAT_NAMES = sorted(name for name, cheat in CHEATS.items() if cheat.final is None)


@pytest.fixture(scope="module")
def spec():
    return lora_spec(inner_steps=4, checkpoint_every=2)


@pytest.fixture(scope="module")
def trainer(spec):
    return Trainer(spec, pydocs())


@pytest.fixture(scope="module")
def replayer():
    replayer = Replayer(children=False)
    yield replayer
    replayer.close()


def round_weights(spec, round_index: int):
    weights = initial_weights(spec, pydocs().shape)
    generator = torch.Generator().manual_seed(round_index)
    return {n: t + 1e-3 * torch.randn(t.shape, generator=generator) for n, t in weights.items()}


def build_round(spec, trainer, cheat: str):
    steps = spec.training.inner_steps

    def honest(worker_index, round_number):
        return honest_round(CheatContext(trainer, round_weights(spec, round_number), worker_index, round_number,
                                         steps, frozenset(), torch.Generator().manual_seed(3)))

    context = CheatContext(trainer, round_weights(spec, 1), 1, 1, steps, frozenset({1}),
                           torch.Generator().manual_seed(11), other_worker_round=lambda: honest(2, 1),
                           earlier_round=lambda: honest(1, 0))
    cheated = honest_round(context) if cheat == "honest" else get_cheat(cheat).play(context)
    return cheated, cheated.publish()


def verdicts(spec, trainer, replayer, cheat: str) -> dict[int, str]:
    replayer.verified_blobs.clear()
    replayer.update_checks.clear()
    cheated, published = build_round(spec, trainer, cheat)
    source = MemorySource()
    source.add_round(1, 1, published.listing, published.blobs)
    segments = range(len(published.listing) - 1) if cheat == "honest" else sorted(cheated.faked_segments)
    assert segments, "a cheat must fake at least one segment"
    return {segment: asyncio.run(verify_segment(claim_for(cheated, published, segment, own_profile()), spec, pydocs(),
                                                source, replayer,
                                                expected_start_hash=weights_hash(round_weights(spec, 1)))).outcome
            for segment in segments}


def test_every_honest_lora_segment_passes_bitwise(spec, trainer, replayer):
    assert set(verdicts(spec, trainer, replayer, "honest").values()) == {PASSED}


@pytest.mark.parametrize("cheat", CHEAT_NAMES)
def test_every_cheat_class_fails_on_a_lora_task(spec, trainer, replayer, cheat):
    outcomes = verdicts(spec, trainer, replayer, cheat)
    assert PASSED not in outcomes.values(), f"{cheat}: {outcomes}"
