"""Every process that trains for the protocol trains under a replayable instruction set, whatever the CPU
(issue 23): the pin before torch loads (`compute/instruction_sets.py`), the refusal of a process that was not
pinned, and entry points that pin without restarting anything. The CPU is made to look like an avx512 one
where the choice is made (its flags, or torch's answer), so these run the avx512 paths on any machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from trolly.compute.determinism import DeterminismProfile, child_environment, require_replayable_process
from trolly.compute.errors import DeterminismError
from trolly.compute.instruction_sets import (CUDA_SETTINGS, PINNED_VARIABLES, REPLAYABLE_INSTRUCTION_SETS,
                                             InstructionSetError, cpu_flags, pin_replayable_instruction_set, pinned_environment,
                                             replayable_instruction_set, runnable_instruction_sets)

AVX512_CPU = frozenset({"sse4_1", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"})
AVX2_CPU = frozenset({"sse4_1", "avx", "avx2", "fma"})
OLD_CPU = frozenset({"sse4_1", "avx"})
AVX2_PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


@pytest.mark.parametrize(("flags", "runnable", "chosen"), [
    (AVX512_CPU, ("default", "avx2", "avx512"), "avx2"),
    (AVX2_CPU, ("default", "avx2"), "avx2"),
    (AVX2_CPU - {"fma"}, ("default",), "default"),  # ATen's avx2 kernels need FMA too
    (OLD_CPU, ("default",), "default"),
    (frozenset(), ("default",), "default"),  # flags unknown: the set every CPU runs
])
def test_a_cpu_trains_under_the_strongest_replayable_set_it_runs(flags, runnable, chosen):
    assert runnable_instruction_sets(flags) == runnable
    assert replayable_instruction_set(flags) == chosen and chosen in REPLAYABLE_INSTRUCTION_SETS


def test_cpu_flags_are_read_from_the_cpuinfo_listing_or_are_empty(tmp_path):
    listing = tmp_path / "cpuinfo"
    listing.write_text("processor\t: 0\nmodel name\t: test\nflags\t\t: fpu sse4_1 avx2 fma\n\nprocessor\t: 1\n")
    assert cpu_flags(listing) == {"fpu", "sse4_1", "avx2", "fma"}
    assert cpu_flags(tmp_path / "absent") == frozenset()
    listing.write_text("processor\t: 0\n")
    assert cpu_flags(listing) == frozenset()


def test_on_an_avx512_cpu_every_library_is_pinned_to_avx2():
    environ: dict[str, str] = {"PATH": "/bin"}
    assert pin_replayable_instruction_set(environ, flags=AVX512_CPU) == "avx2"
    assert environ == {"PATH": "/bin", **AVX2_PINNED, **CUDA_SETTINGS}


def test_a_replayable_set_chosen_before_stands_and_the_libraries_follow_it():
    environ = {"ATEN_CPU_CAPABILITY": "default"}
    assert pin_replayable_instruction_set(environ, flags=AVX512_CPU) == "default"
    assert environ == {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41",
                       **CUDA_SETTINGS}


@pytest.mark.parametrize("inherited", ["avx512", "neon", ""])
def test_an_inherited_set_no_verifier_replays_is_replaced_by_the_cpus_replayable_one(inherited):
    environ = {"ATEN_CPU_CAPABILITY": inherited, "MKL_CBWR": "AUTO"}
    assert pin_replayable_instruction_set(environ, flags=AVX512_CPU) == "avx2"
    assert environ == {**AVX2_PINNED, **CUDA_SETTINGS}


def test_a_child_environment_drops_the_parents_pins_for_its_own():
    parent = {"HOME": "/h", **AVX2_PINNED}
    child = child_environment(DeterminismProfile(threads=2, instruction_set="avx512"), parent)
    assert child["ATEN_CPU_CAPABILITY"] == "avx512" and child["HOME"] == "/h"
    assert "MKL_CBWR" not in child and "ONEDNN_MAX_CPU_ISA" not in child and child["OMP_NUM_THREADS"] == "2"
    assert child_environment(DeterminismProfile(instruction_set="default"), parent)["MKL_CBWR"] == "COMPATIBLE"
    with pytest.raises(InstructionSetError, match="ATEN_CPU_CAPABILITY takes one of default, avx2, avx512"):
        pinned_environment("neon", parent)


def test_a_pin_after_torch_was_imported_is_refused_with_the_fix(monkeypatch):
    for name in PINNED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert "torch" in sys.modules
    with pytest.raises(InstructionSetError, match="before importing torch.*ATEN_CPU_CAPABILITY=avx2"):
        pin_replayable_instruction_set()
    assert "ATEN_CPU_CAPABILITY" not in os.environ  # nothing half-set


@pytest.fixture(scope="module")
def digits():
    from trolly.compute.data import build_dataset, dataset_from_blobs

    return dataset_from_blobs(build_dataset("digits"))


@pytest.fixture(scope="module")
def spec(digits):
    from trolly.compute.spec import parse_spec
    from worker_helpers import spec_document

    return parse_spec(spec_document(digits.manifest_hash))


def test_the_test_session_trains_and_commits_a_replayable_profile(digits, spec):
    """No monkeypatching: on this machine's real CPU (avx512 or not), what in-process training commits."""
    from trolly.compute.training import Trainer, initial_weights, run_round

    expected = pin_replayable_instruction_set(dict(os.environ))  # what the session's pin chose (or was told)
    assert expected in REPLAYABLE_INSTRUCTION_SETS and require_replayable_process() == expected
    trainer = Trainer(spec, digits)
    run_round(trainer, initial_weights(spec, digits.shape), worker_index=0, round_index=0, steps=4,
              sink=lambda record, data: None)
    assert f"/isa-{expected}/" in trainer.profile_id


def pretend_avx512(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")


def test_a_process_running_avx512_refuses_to_train_for_the_protocol_and_says_how_to_fix_it(monkeypatch):
    pretend_avx512(monkeypatch)
    with pytest.raises(DeterminismError, match="runs avx512, which verifiers refuse.*ATEN_CPU_CAPABILITY=avx2 "
                                               "MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"):
        require_replayable_process()


def test_a_process_whose_math_libraries_are_not_pinned_refuses_too(monkeypatch):
    monkeypatch.delenv("MKL_CBWR")
    with pytest.raises(DeterminismError, match="MKL_CBWR=.* is not set"):
        require_replayable_process()


def test_a_verifier_whose_libraries_are_not_pinned_replays_its_own_set_in_a_pinned_child(monkeypatch, spec):
    from trolly.verifier.segment_check import Replayer

    own = DeterminismProfile(threads=1).id
    pinned = Replayer()
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    unpinned = Replayer()
    try:
        assert pinned.plan(spec, own).where == "process"
        assert unpinned.plan(spec, own).where == "child"
    finally:
        pinned.close()
        unpinned.close()


def test_the_worker_started_in_process_on_avx512_fails_clearly_without_restarting(monkeypatch, tmp_path):
    """`trolly-worker start` through click's runner, as a test or a library caller runs it: no exec (the
    session's process guard would fail this test), an `Error:` line with the fix and exit code 1."""
    from click.testing import CliRunner

    from trolly.compute.worker.cli import main

    home = tmp_path / "w"
    created = CliRunner().invoke(main, ["init", "--home", str(home), "--key", "w", "--keyring-backend", "test",
                                        "--create-key", "--node", "127.0.0.1:9"])
    assert created.exit_code == 0, created.output
    pretend_avx512(monkeypatch)
    result = CliRunner().invoke(main, ["start", "--home", str(home)])
    assert result.exit_code == 1, result.output
    assert "Error: this process cannot train for the protocol" in result.output
    assert "ATEN_CPU_CAPABILITY=avx2" in result.output


PROBE = """
import json, sys
{pin}
import torch
from trolly.compute.determinism import require_replayable_process, DeterminismProfile
try:
    isa = require_replayable_process()
except Exception as error:
    isa = f"refused: {{error}}"
torch.manual_seed(0)
a, b = torch.randn(257, 311), torch.randn(311, 129)
print(json.dumps({{"isa": isa, "profile": DeterminismProfile().id, "product": (a @ b).sum().item()}}))
"""


def run_probe(environment: dict[str, str], pin: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE.format(pin=pin)], env=environment, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def unpinned_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in PINNED_VARIABLES}


@pytest.mark.parametrize("entry", ["trolly.compute.worker.entry", "trolly.verifier.entry", "trolly.localnet.entry",
                                   "trolly.console.entry"])
def test_a_console_script_pins_the_real_cpu_before_torch_loads(entry):
    """A fresh process with nothing set, as a user starts one: the console script's module imports no torch,
    its `main` (here `--help`) pins and runs the CLI, and the process then trains under this CPU's
    replayable set (avx2 on an avx512 CPU), with no restart."""
    probe = run_probe(unpinned_environment(), f"""
import {entry} as entry
assert "torch" not in sys.modules, "the console script imported torch before its pin"
sys.argv = ["console-script", "--help"]
try:
    entry.main()
except SystemExit as exit_:
    assert exit_.code in (0, None), exit_.code""")
    expected = replayable_instruction_set(cpu_flags())
    assert probe["isa"] == expected and f"/isa-{expected}/" in probe["profile"]


def test_a_pinned_child_computes_what_a_child_given_the_profile_environment_computes():
    pinned = run_probe(unpinned_environment(), "import benchmarks")  # `python -m benchmarks.*` pins on import
    chosen = replayable_instruction_set(cpu_flags())
    explicit = run_probe(child_environment(DeterminismProfile(instruction_set=chosen), unpinned_environment()), "")
    assert pinned["isa"] == explicit["isa"] == chosen
    assert pinned["product"] == explicit["product"]


def test_a_process_started_without_the_pin_is_told_how_to_fix_it_where_the_cpu_needs_it():
    probe = run_probe(unpinned_environment(), "")
    if "avx512" in runnable_instruction_sets(cpu_flags()):
        assert probe["isa"].startswith("refused: this process cannot train for the protocol: its torch runs avx512")
    else:  # the CPU's own set is replayable, but the math libraries are not pinned to it
        assert probe["isa"].startswith("refused:") and "is not set" in probe["isa"]


def test_a_verifier_pinned_to_default_still_replays_what_its_cpu_runs_in_a_child(spec, monkeypatch):
    """Told ATEN_CPU_CAPABILITY=default, a verifier on an avx2 (or avx512) CPU must still replay an honest avx2
    segment, in a child, not FAIL it for a set its CPU runs (benchmarks.verification under default showed it)."""
    from trolly.verifier import isa_child_replay
    from trolly.verifier.replay_profile import Replayer

    assert isa_child_replay.supported_instruction_sets("default", AVX512_CPU) == ("default", "avx2", "avx512")
    assert isa_child_replay.supported_instruction_sets("default", OLD_CPU) == ("default",)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    monkeypatch.setattr(isa_child_replay, "cpu_flags", lambda: AVX2_CPU)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    replayer = Replayer()
    try:
        avx2 = DeterminismProfile(threads=1, instruction_set="avx2").id
        assert replayer.plan(spec, avx2).where == "child"
    finally:
        replayer.close()
