"""The `wasm32` profile: one id and one kernel version in every place that names them, and a chain that refuses
commitments under it for as long as no verifier replays them."""

from __future__ import annotations

import re
import subprocess

import pytest

from trolly.chain.market.errors import UnknownProfile
from trolly.chain.market.profiles import WASM32_PROFILE, check_profile_form
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


def test_the_chain_refuses_a_wasm32_commitment_while_no_verifier_replays_it():
    """A worker committing under a profile that no verifier can replay would be paid for work nobody judges:
    until the verifier replays wasm32 segments with the kernel, the chain refuses the profile."""
    with pytest.raises(UnknownProfile):
        check_profile_form(WASM32_PROFILE)
