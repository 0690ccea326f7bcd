"""A test that replaces or crashes its pytest-xdist worker fails the run promptly, by name (issue 23 item 3).

An inner pytest run with the suite's process guard (`process_guard.py`), two workers and `--dist loadscope`
as `make test` runs: a
test that execs another program or hard-exits fails alone, and the run goes on; one that crashes in C ends
the run at once with its name. Before either, such a run waited forever."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "helpers"

REPLACING_TESTS = '''
import os, sys

def test_execs_a_long_running_program():
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ))

def test_hard_exits():
    os._exit(3)

def test_an_honest_neighbour_still_runs():
    assert sum(range(4)) == 6
'''

CRASHING_TESTS = '''
import ctypes

def test_crashes_in_c():
    ctypes.string_at(0)
'''


def run_inner_suite(directory: Path, **modules: str) -> tuple[int, str]:
    for name, source in modules.items():
        (directory / f"test_{name}.py").write_text(source)
    run = subprocess.run([sys.executable, "-m", "pytest", "--rootdir", str(directory), "-p", "process_guard", "-p", "no:cacheprovider",
                          "-p", "no:faulthandler", "-n", "2", "--dist", "loadscope", "-q", str(directory)],
                         cwd=directory, env={**os.environ, "PYTHONPATH": str(HELPERS)}, capture_output=True,
                         text=True, timeout=240)
    return run.returncode, run.stdout + run.stderr


def test_an_exec_or_a_hard_exit_fails_its_test_alone(tmp_path):
    code, output = run_inner_suite(tmp_path, replacing=REPLACING_TESTS)
    assert code == 1 and "2 failed, 1 passed" in output, output
    assert "FAILED test_replacing.py::test_execs_a_long_running_program" in output
    assert "FAILED test_replacing.py::test_hard_exits" in output
    assert "ProcessReplaced: os.execve(" in output and "ProcessReplaced: os._exit(3,)" in output


def test_a_crash_in_c_ends_the_run_at_once_with_the_tests_name(tmp_path):
    code, output = run_inner_suite(tmp_path, crashing=CRASHING_TESTS, replacing=REPLACING_TESTS)
    assert code == 1, output
    assert "crashed while running 'test_crashing.py::test_crashes_in_c'" in output, output
    assert "FAILED test_crashing.py::test_crashes_in_c" in output
