"""The `wasm32` profile: one id and one kernel version in every place that names them, and a chain that accepts
commitments under it in a task that allows the kernel, now that verifiers replay them (`verifier/replay_profile.py`)."""

from __future__ import annotations

import re
import subprocess

import pytest

from trolly.chain.market.errors import ProfileNotAllowed
from trolly.chain.market.profiles import WASM32_PROFILE, check_profile_form, check_replayable
from trolly.chain.state import MemoryKV, State
from trolly.compute.wasm.instance import KernelInstance
from trolly.compute.wasm.profile import KERNEL_SOURCE, KERNEL_VERSION, PROFILE_ID, WASM32

from wasm_helpers import NODE, ROOT


def test_the_profile_id_and_kernel_version_agree_everywhere():
    assert PROFILE_ID == WASM32_PROFILE == f"{WASM32}/kernel-{KERNEL_VERSION}"
    assert re.search(rf"#define KERNEL_VERSION {KERNEL_VERSION}\n", KERNEL_SOURCE.read_text())
    assert KernelInstance((2, 2), 1)._call("kernel_version") == KERNEL_VERSION


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_javascript_kernel_names_the_same_profile():
    script = "import { PROFILE_ID } from './compute/wasm/kernel.mjs'; console.log(PROFILE_ID);"
    done = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert done.stdout.strip() == PROFILE_ID


def test_the_chain_accepts_a_wasm32_commitment_only_where_the_task_allows_the_kernel():
    """A worker committing under a profile that no verifier can replay would be paid for work nobody judges:
    the chain accepts wasm32 now that every verifier replays it (`Replayer.plan`), and only in a task whose spec
    allows the kernel (tests/chain/test_market_wasm32_profile.py drives it through blocks)."""
    check_profile_form(WASM32_PROFILE)
    check_replayable(State(MemoryKV()), WASM32_PROFILE, b"w" * 20, ["torch", "wasm32"])
    with pytest.raises(ProfileNotAllowed):
        check_replayable(State(MemoryKV()), WASM32_PROFILE, b"w" * 20, ["torch"])
