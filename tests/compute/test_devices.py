"""The trainer's device (issue 26 item 7): CUDA's deterministic settings, the GPU in the determinism profile, a
verifier without that GPU voting nothing, and a GPU's memory declared. Everything but the last tests runs on
the CPU; those need a GPU and skip without one."""

from __future__ import annotations

import pytest
import torch

from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.determinism import DeterminismProfile
from trolly.compute.devices import (check_cuda_environment, device_memory_mb, gpu_profile_part, nvidia_driver_version,
                                    parse_gpu_profile_part, training_device)
from trolly.compute.errors import DeterminismError
from trolly.compute.instruction_sets import CUDA_SETTINGS, pin_replayable_instruction_set, pinned_environment
from trolly.compute.spec import example_spec, spec_from_dict
from trolly.verifier.errors import VerifierError
from trolly.verifier.replay_profile import ProfileNotHere, ProfileRefused, Replayer, parse_profile, profile_gpu

H100 = gpu_profile_part("NVIDIA H100 80GB HBM3", "550.54.15", "12.4")
NO_GPU = "this machine has no CUDA GPU"


def test_a_gpu_profile_part_names_the_model_driver_and_cuda_without_separators():
    assert H100 == "gpu-NVIDIA-H100-80GB-HBM3+driver-550.54.15+cuda-12.4"
    assert parse_gpu_profile_part(H100) == ("NVIDIA-H100-80GB-HBM3", "550.54.15", "12.4")
    assert parse_gpu_profile_part("gpu-x+driver-1") is None and parse_gpu_profile_part("isa-avx2") is None


def test_a_gpu_profile_part_without_its_driver_is_refused():
    with pytest.raises(DeterminismError, match="driver"):
        gpu_profile_part("NVIDIA H100", " / ", "12.4")


def test_a_cuda_profile_id_carries_the_gpu_and_a_cpu_id_is_unchanged():
    cpu = DeterminismProfile(threads=1, instruction_set="avx2")
    gpu = DeterminismProfile(threads=1, instruction_set="avx2", device="cuda", gpu=H100)
    assert cpu.id == f"torch-{torch.__version__}/threads-1/isa-avx2/deterministic-ftz"
    assert gpu.id == f"torch-{torch.__version__}/threads-1/isa-avx2/{H100}/deterministic-ftz"
    assert parse_profile(gpu.id) == parse_profile(cpu.id) == (torch.__version__, 1, "avx2")
    assert profile_gpu(gpu.id) == H100 and profile_gpu(cpu.id) is None


def test_a_gpu_on_a_cpu_profile_is_refused():
    with pytest.raises(DeterminismError, match="gpu"):
        DeterminismProfile(gpu=H100)
    with pytest.raises(DeterminismError, match="device"):
        DeterminismProfile(device="tpu")


def spec():
    return spec_from_dict(example_spec(dataset_from_blobs(build_dataset("digits")).manifest_hash))


def gpu_profile_id(replayer: Replayer, gpu: str) -> str:
    return DeterminismProfile(instruction_set=replayer.in_process_instruction_set, device="cuda", gpu=gpu).id


def test_a_verifier_without_the_committed_gpu_replays_its_cpu_part_within_the_tolerance():
    """The whole validator set's check of a disputed GPU segment (issue 32 item 1): a verifier without that GPU
    replays the profile's CPU part, which every verifier replays the same, and judges within the tolerance."""
    replayer = Replayer(children=False)
    replayer.gpu = None  # as on a machine without CUDA, whatever this one has
    profile = gpu_profile_id(replayer, H100)
    plan = replayer.plan(spec(), profile)
    assert (plan.where, plan.gpu, plan.instruction_set) == ("process", None, replayer.in_process_instruction_set)
    replayer.gpu = gpu_profile_part("NVIDIA A100-SXM4-40GB", "550.54.15", "12.4")
    assert replayer.plan(spec(), profile).gpu is None  # another GPU: on the CPU too
    replayer.gpu = H100
    replayer.in_process_instruction_set = "other"  # its own GPU, but not the profile's instruction set here
    with pytest.raises(ProfileNotHere, match="H100") as refusal:
        replayer.plan(spec(), profile)
    assert isinstance(refusal.value, VerifierError) and not isinstance(refusal.value, ProfileRefused)
    replayer.close()


def test_a_verifier_with_the_committed_gpu_replays_it_on_that_gpu():
    replayer = Replayer(children=False)
    replayer.gpu = H100
    plan = replayer.plan(spec(), gpu_profile_id(replayer, H100))
    assert (plan.where, plan.gpu) == ("process", H100)
    replayer.close()


def test_the_pin_sets_the_cublas_workspace_and_keeps_one_already_set():
    environ: dict[str, str] = {}
    pin_replayable_instruction_set(environ, frozenset())
    assert environ["CUBLAS_WORKSPACE_CONFIG"] == CUDA_SETTINGS["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    environ = {"CUBLAS_WORKSPACE_CONFIG": ":16:8", "ATEN_CPU_CAPABILITY": "default"}
    pin_replayable_instruction_set(environ, frozenset())
    assert environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert pinned_environment("default", {})["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_cuda_training_is_refused_without_the_pinned_cublas_workspace():
    with pytest.raises(DeterminismError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8"):
        check_cuda_environment({})
    check_cuda_environment(dict(CUDA_SETTINGS))


def test_the_test_session_itself_runs_with_the_cuda_settings():
    check_cuda_environment()  # tests/conftest.py pins before torch loads


def test_the_driver_version_is_read_from_the_kernel_module(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:09 UTC 2024\n"
                       "GCC version:  gcc version 12.2.0\n")
    assert nvidia_driver_version(version) == "550.54.15"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_asking_for_cuda_without_a_gpu_is_refused_not_moved_to_the_cpu():
    assert training_device() == "cpu"
    with pytest.raises(DeterminismError, match="no CUDA GPU"):
        training_device("cuda")
    with pytest.raises(DeterminismError, match="device must be"):
        training_device("gpu")


def test_a_cpu_worker_declares_the_machines_memory():
    assert device_memory_mb("cpu") > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_a_gpu_worker_declares_the_gpus_memory():
    assert device_memory_mb("cuda") == torch.cuda.get_device_properties(0).total_memory // 2**20


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_a_segment_trained_on_the_gpu_replays_bit_for_bit_there():
    import dataclasses

    from trolly.compute.checkpoints import TrainingState, checkpoint_hash
    from trolly.compute.training import Trainer, initial_weights, train_segment

    dataset = dataset_from_blobs(build_dataset("digits"))
    cuda = dataclasses.replace(spec(), determinism=DeterminismProfile(device="cuda"))
    start = TrainingState.fresh(initial_weights(cuda, dataset.shape))
    ends = [checkpoint_hash(train_segment(Trainer(cuda, dataset), start, worker_index=0, round_index=0, end_step=5))
            for _ in range(2)]
    assert ends[0] == ends[1]
    assert profile_gpu(Trainer(cuda, dataset).profile_id) is not None
