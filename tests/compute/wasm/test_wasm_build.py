"""The committed kernel.wasm is what kernel.c builds to, byte for byte, and holds nothing machine-dependent."""

from __future__ import annotations

import pytest
import wasmtime

from trolly.compute.wasm.build import PINNED_CLANG, build_kernel, check_committed, clang_version, toolchain_missing
from trolly.compute.wasm.profile import KERNEL_WASM, kernel_sha256

needs_toolchain = pytest.mark.skipif(toolchain_missing() is not None,
                                     reason=f"{toolchain_missing()}: make setup installs them as root")


@needs_toolchain
def test_the_source_builds_to_the_same_bytes_twice(tmp_path):
    build_kernel(tmp_path / "first.wasm")
    build_kernel(tmp_path / "second.wasm")
    assert (tmp_path / "first.wasm").read_bytes() == (tmp_path / "second.wasm").read_bytes()


@needs_toolchain
def test_the_committed_wasm_is_what_the_pinned_compiler_builds(tmp_path):
    if clang_version("clang") != PINNED_CLANG:
        pytest.skip(f"{clang_version('clang')} is not the pinned {PINNED_CLANG}: its bytes may differ")
    build_kernel(tmp_path / "kernel.wasm")
    assert (tmp_path / "kernel.wasm").read_bytes() == KERNEL_WASM.read_bytes()
    assert f"the committed bytes (sha256 {kernel_sha256()}) are what kernel.c builds to" in check_committed()


def test_the_kernel_imports_nothing_and_uses_only_the_mvp_and_fixed_width_simd():
    """No import: nothing outside the kernel's own code (no libc, no host function) can change a result. No
    feature but the MVP's and fixed-width SIMD (each lane the scalar IEEE operation): it loads in an engine with
    relaxed SIMD and the other proposals switched off (reference types stay: wasmtime needs them for its GC
    proposals, and the MVP's one table is all they would touch)."""
    config = wasmtime.Config()
    config.wasm_simd = True
    config.wasm_relaxed_simd = False
    for proposal in ("bulk_memory", "multi_value", "threads", "memory64", "multi_memory",
                     "tail_call", "function_references", "gc", "exceptions", "wide_arithmetic"):
        setattr(config, f"wasm_{proposal}", False)
    module = wasmtime.Module(wasmtime.Engine(config), KERNEL_WASM.read_bytes())
    assert list(module.imports) == []
    assert {"memory", "configure", "train_step", "kernel_version"} <= {export.name for export in module.exports}
