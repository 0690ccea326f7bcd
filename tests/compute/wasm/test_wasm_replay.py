"""The `wasm32` profile end to end in one process (issue 37 item 1): a worker's round trained by the kernel
(`WasmKernelTrainer`, through the one round loop), committed under `wasm32/kernel-1` and replayed by the verifier
with the kernel alone, bit for bit; every cheat of the registry played on such a round and caught as on the CPU
(the same expectations as tests/compute/test_regression_cheats.py); a verifier refusing wasm32 where the spec does
not allow it; and the kernel keeping subnormals inside a torch round, which flushes them."""

from __future__ import annotations

import numpy as np
import pytest

from trolly.compute.checkpoints import TrainingState, checkpoint_hash, final_state
from trolly.compute.cheats import CHEATS, honest_round, register_cheat
from trolly.compute.data import build_dataset
from trolly.compute.data.lazy_dataset import lazy_dataset
from trolly.compute.data.manifest import decode_shard, parse_manifest
from trolly.compute.determinism import flushing_subnormals
from trolly.compute.errors import WasmKernelError
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.compute.wasm.instance import KernelInstance
from trolly.compute.wasm.profile import PROFILE_ID
from trolly.compute.wasm.segment import WasmTrainer, flushing_here, ieee_subnormals, train_segment_wasm
from trolly.compute.wasm.trainer import WasmKernelTrainer, trainer_for
from trolly.verifier.replay_profile import ProfileRefused
from trolly.verifier.segment_check import PASSED, Replayer

import cheat_helpers
from cheat_helpers import cheat_worker, digits_dataset, replay_round_one, wasm32_digits_spec

ROUND_CHEATS = sorted(name for name, cheat in CHEATS.items() if cheat.final is None)


digits = digits_dataset
digits_spec = wasm32_digits_spec


def kernel_hashes(spec, start_weights, worker_index, round_index, steps) -> list[str]:
    """A round's checkpoint hashes as a verifier replays it: the kernel alone, segment by segment."""
    kernel = WasmTrainer(spec, digits())
    state = TrainingState.fresh(start_weights)
    hashes = [checkpoint_hash(state).hex()]
    for end in range(spec.training.checkpoint_every, steps + spec.training.checkpoint_every,
                     spec.training.checkpoint_every):
        end = min(end, steps)
        state = train_segment_wasm(kernel, state, worker_index=worker_index, round_index=round_index, end_step=end)
        hashes.append(checkpoint_hash(final_state(state) if end == steps else state).hex())
    return hashes


def test_a_worker_round_under_wasm32_is_the_kernels_bytes_and_names_its_profile():
    spec = digits_spec()
    trainer = trainer_for(spec, digits(), "wasm32")
    assert isinstance(trainer, WasmKernelTrainer) and trainer.profile_id == PROFILE_ID == "wasm32/kernel-1"
    weights = initial_weights(spec, digits().shape)
    result = run_round(trainer, weights, worker_index=1, round_index=2, steps=12)
    assert [c.digest.hex() for c in result.checkpoints] == kernel_hashes(spec, weights, 1, 2, 12)
    torch_round = run_round(Trainer(spec, digits()), weights, worker_index=1, round_index=2, steps=12)
    assert torch_round.checkpoints[1].digest != result.checkpoints[1].digest  # the kernel's own bytes, not torch's


def test_a_verifier_replays_a_wasm32_segment_on_a_lazily_fetched_dataset_as_on_a_loaded_one():
    """A verifier fetches a requester's served dataset lazily (`LazyRows`, no `.numpy()`): the kernel takes it as
    it takes the loaded tensors, with the same bytes (a wasm32 task on `task submit --data` failed every replay)."""
    spec = digits_spec()
    blobs = build_dataset("digits")
    lazy = lazy_dataset(blobs.manifest_hash, parse_manifest(blobs.manifest),
                        lambda entry: decode_shard(blobs.shards[entry["hash"]], entry))
    start = TrainingState.fresh(initial_weights(spec, digits().shape))
    ends = [train_segment_wasm(WasmTrainer(spec, dataset), start, worker_index=1, round_index=0, end_step=6)
            for dataset in (digits(), lazy)]
    assert checkpoint_hash(ends[0]) == checkpoint_hash(ends[1])


def test_a_round_resumed_from_a_loaded_checkpoint_under_wasm32_gives_the_same_bytes():
    """The trainer hands its state to the kernel again after any load: a stale kernel state would train on."""
    spec = digits_spec()
    trainer = trainer_for(spec, digits(), "wasm32")
    weights = initial_weights(spec, digits().shape)
    run_round(trainer, weights, worker_index=0, round_index=0, steps=12)  # the kernel now holds another state
    trainer.load(TrainingState.fresh(weights))
    with flushing_subnormals():
        for _ in range(5):
            trainer.train_step(0, 0)
    assert checkpoint_hash(trainer.snapshot()).hex() == kernel_hashes(spec, weights, 0, 0, 12)[1]


def test_the_kernel_is_refused_where_the_spec_does_not_allow_it_or_cannot_train_the_model():
    with pytest.raises(WasmKernelError, match="allows the kernels torch, not wasm32"):
        trainer_for(digits_spec(kernels=("torch",)), digits(), "wasm32")
    with pytest.raises(WasmKernelError, match="allows the kernels wasm32, not torch"):
        trainer_for(digits_spec(kernels=("wasm32",)), digits(), "torch")
    with pytest.raises(WasmKernelError, match="kernel must be one of"):
        trainer_for(digits_spec(), digits(), "webgpu")


def subnormal_run(guard) -> bytes:
    """Three steps of a tiny model whose weights are subnormal, with weight decay: flushing changes them."""
    spec = digits_spec()
    kernel = KernelInstance((2, 4, 3), 4)
    generator = np.random.default_rng(0)
    kernel.set_data(generator.standard_normal((8, 2)).astype(np.float32), np.arange(8) % 3)
    kernel.set_training(spec.training)
    weights = (generator.standard_normal(kernel.params) * 1e-39).astype(np.float32)
    kernel.load(weights, np.zeros_like(weights), np.zeros_like(weights), 0)
    kernel.set_stream(1, 0, 0)
    with guard():
        for step in range(3):
            kernel.train_step(step)
    return kernel.state()[0].tobytes()


def test_the_kernel_keeps_subnormals_inside_a_torch_round_that_flushes_them():
    """Attack on replay: the worker's steps run inside `flushing_subnormals` (x86 FTZ/DAZ), which wasmtime's
    compiled code obeys, while a browser and the verifier keep subnormals: without `ieee_subnormals` a worker's
    honest wasm32 checkpoint would differ from every replay of it. The guard gives the IEEE bytes and restores
    the thread's setting."""
    import contextlib

    ieee = subnormal_run(contextlib.nullcontext)

    def flushed_then(inner):
        @contextlib.contextmanager
        def both():
            with flushing_subnormals(), inner():
                yield
        return both

    assert subnormal_run(flushed_then(contextlib.nullcontext)) != ieee  # the hazard is real
    assert subnormal_run(flushed_then(ieee_subnormals)) == ieee
    with flushing_subnormals():
        with ieee_subnormals():
            assert not flushing_here()
        assert flushing_here()
    assert not flushing_here()


# ---- the verifier and the cheats ----------------------------------------------------------------------------

def play_worker_round(name, spec, trainer, state, store, round_index, profile=PROFILE_ID):
    """Round `round_index` of task 7 played by the cheat `name` on digits, committed under `profile`."""
    return cheat_helpers.play_worker_round(name, spec, digits(), trainer, state, store, round_index, profile)


def replay_outcomes(spec, state, store, message) -> list[tuple[str, str]]:
    """The verifier's outcome and reason on every segment of round 1 of task 7."""
    return [(report.outcome, report.reason)
            for report in replay_round_one(spec, digits(), state, store, message, "wasm32")]


@pytest.fixture
def honest_name():
    register_cheat("test_honest_wasm32", "an honest round, through the cheat path")(honest_round)
    yield "test_honest_wasm32"
    CHEATS.pop("test_honest_wasm32", None)


def test_an_honest_wasm32_round_passes_every_segment_bit_for_bit(tmp_path, honest_name):
    spec = digits_spec()
    state, store = cheat_worker(tmp_path)
    trainer = WasmKernelTrainer(spec, digits())
    play_worker_round(honest_name, spec, trainer, state, store, 0)
    message = play_worker_round(honest_name, spec, trainer, state, store, 1)
    outcomes = replay_outcomes(spec, state, store, message)
    assert [outcome for outcome, _ in outcomes] == [PASSED] * 3
    assert all("bitwise" in reason for _, reason in outcomes)


def test_a_wasm32_round_in_a_task_that_does_not_allow_the_kernel_fails_every_segment(tmp_path, honest_name):
    """Attack: a round trained with the kernel and committed in a torch-only task (the chain refuses the
    commitment; a verifier handed one anyway refuses to replay it)."""
    allowed, torch_only = digits_spec(), digits_spec(kernels=("torch",))
    state, store = cheat_worker(tmp_path)
    trainer = WasmKernelTrainer(allowed, digits())  # the kernel, from the torch-only task's own start weights
    play_worker_round(honest_name, torch_only, trainer, state, store, 0)
    message = play_worker_round(honest_name, torch_only, trainer, state, store, 1)
    outcomes = replay_outcomes(torch_only, state, store, message)
    assert [outcome for outcome, _ in outcomes] == ["fail"] * 3
    assert "a kernel the spec does not allow" in outcomes[0][1]
    with pytest.raises(ProfileRefused):
        Replayer(children=False).plan(torch_only, PROFILE_ID)


def test_a_wasm32_round_committed_under_a_cpu_profile_fails(tmp_path, honest_name):
    """Attack: kernel bytes claimed as a CPU profile's (or the reverse): the replay under the named profile differs."""
    from verifier_helpers import own_profile

    spec = digits_spec()
    state, store = cheat_worker(tmp_path)
    trainer = WasmKernelTrainer(spec, digits())
    play_worker_round(honest_name, spec, trainer, state, store, 0, own_profile())
    message = play_worker_round(honest_name, spec, trainer, state, store, 1, own_profile())
    assert [outcome for outcome, _ in replay_outcomes(spec, state, store, message)] == ["fail"] * 3


@pytest.mark.parametrize("name", ROUND_CHEATS)
def test_every_cheat_on_a_wasm32_round_is_caught(tmp_path, name):
    """Attack: each way of faking a round in the registry, played by a worker training with the wasm32 kernel
    and committing under its profile. Caught as on the CPU: none of its segments passes (`fewer_steps` trains
    the first half of the round honestly: only its later ones fail)."""
    spec = digits_spec()
    state, store = cheat_worker(tmp_path)
    trainer = WasmKernelTrainer(spec, digits())
    play_worker_round("skipped_steps" if name == "replayed_round" else name, spec, trainer, state, store, 0)
    message = play_worker_round(name, spec, trainer, state, store, 1)
    caught = [outcome != PASSED for outcome, _ in replay_outcomes(spec, state, store, message)]
    assert caught == ([False] * (len(caught) - 1) + [True] if name == "fewer_steps" else [True] * len(caught))
