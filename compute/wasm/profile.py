"""The `wasm32` determinism profile: the kernel that trains under it and the id a worker would commit.

Unlike the CPU and GPU profiles (`compute.determinism`), the bytes of a `wasm32` segment depend on nothing of
the machine: the kernel fixes every float operation, so any WebAssembly engine (a browser's, wasmtime in a
verifier) and the JavaScript fallback give the same bits. What they depend on is the kernel's arithmetic, named
by its version (`KERNEL_VERSION`, which `kernel.c` and `kernel.mjs` export as well): a change to any operation
is a new version, hence a new profile id, and the committed test vectors (tests/compute/wasm) fail until then.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

WASM32 = "wasm32"
"""The profile's name, beside the CPU profiles' `torch-<v>/...` and the GPU ones'."""

KERNEL_VERSION = 1
"""The version of the kernel's arithmetic (`kernel_version()` of the .wasm, `KERNEL_VERSION` of kernel.mjs)."""

PROFILE_ID = f"{WASM32}/kernel-{KERNEL_VERSION}"
"""What a commitment trained under the kernel would carry as its determinism profile."""

KERNEL_SOURCE = Path(__file__).with_name("kernel.c")
KERNEL_WASM = Path(__file__).with_name("kernel.wasm")
"""The committed build of `KERNEL_SOURCE` (`build.py` checks that the source builds to exactly these bytes)."""


def kernel_sha256() -> str:
    """The hex sha256 of the committed .wasm: what a browser can check the file it fetched against."""
    return hashlib.sha256(KERNEL_WASM.read_bytes()).hexdigest()
