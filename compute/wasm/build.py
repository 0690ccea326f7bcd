"""Build the kernel from its C source, and check that the committed .wasm is exactly what the source builds to.

    python -m trolly.compute.wasm.build            # build and compare with compute/wasm/kernel.wasm (make setup)
    python -m trolly.compute.wasm.build --write    # after a change to kernel.c: write the new kernel.wasm

The .wasm is committed: a browser fetches it as it is, a verifier replays with it, and no one needs a compiler.
The check keeps the committed bytes honest: Debian's clang and lld, with the flags below, build the same bytes
every time (no debug info, no paths, no timestamps; `--strip-all` drops the names and the producers section).
Another clang version emits other (equally valid) code, so the bytes are compared only under the pinned one;
under any other the build is still run, and the kernel's arithmetic is held by the test vectors instead.

The flags are the kernel's determinism rules for the compiler: wasm32 with the MVP feature set plus fixed-width
SIMD (`simd128`, whose lanes each do the scalar IEEE operation; never relaxed SIMD, whose fused multiply-add
depends on the machine), no fused multiply-add contraction, no fast-math, no libc and no builtins (nothing
outside the source's own code is linked in).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import WasmKernelError
from .profile import KERNEL_SOURCE, KERNEL_WASM, kernel_sha256

PINNED_CLANG = "Debian clang version 14.0.6"
"""The compiler the committed .wasm was built with: Debian bookworm's `clang` and `lld` packages."""

FLAGS = ("--target=wasm32", "-mcpu=mvp", "-msimd128", "-O2", "-ffp-contract=off", "-fno-fast-math", "-fno-builtin",
         "-nostdlib", "-Wall", "-Wextra", "-Werror", "-Wl,--no-entry", "-Wl,--strip-all")


def clang_version(clang: str) -> str:
    """The first line of `clang --version`."""
    return subprocess.run([clang, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]


def build_kernel(output: Path, clang: str = "clang") -> None:
    """Compile and link kernel.c into `output`; WasmKernelError with the compiler's message if it fails."""
    done = subprocess.run([clang, *FLAGS, "-o", str(output), str(KERNEL_SOURCE)], capture_output=True, text=True)
    if done.returncode != 0:
        raise WasmKernelError(f"building {KERNEL_SOURCE.name} failed:\n{done.stderr.strip()}")


def toolchain_missing() -> str | None:
    """Why the kernel cannot be built here (no clang, no wasm-ld), or None."""
    missing = [tool for tool in ("clang", "wasm-ld") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found (apt-get install clang lld)" if missing else None


def check_committed(clang: str = "clang") -> str:
    """Build into a temporary file and compare with the committed .wasm; a line saying what was found. Raises
    WasmKernelError when the pinned compiler builds other bytes than the committed ones."""
    version = clang_version(clang)
    with tempfile.TemporaryDirectory() as folder:
        built = Path(folder) / "kernel.wasm"
        build_kernel(built, clang)
        same = built.read_bytes() == KERNEL_WASM.read_bytes()
    if same:
        return (f"{KERNEL_WASM.name}: the committed bytes (sha256 {kernel_sha256()}) are what {KERNEL_SOURCE.name} "
                f"builds to ({version})")
    if version != PINNED_CLANG:
        return (f"{KERNEL_WASM.name}: built with {version}, not the pinned {PINNED_CLANG}, so its bytes differ from "
                f"the committed ones; the committed .wasm is used")
    raise WasmKernelError(f"{KERNEL_SOURCE.name} does not build to the committed {KERNEL_WASM.name} under "
                          f"{version}: after changing the source, run python -m trolly.compute.wasm.build --write "
                          f"(and bump KERNEL_VERSION if the arithmetic changed)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trolly.compute.wasm.build", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the build over the committed kernel.wasm")
    arguments = parser.parse_args(argv)
    missing = toolchain_missing()
    if missing is not None:
        print(f"the wasm kernel was not rebuilt: {missing}; the committed {KERNEL_WASM.name} is used")
        return 1 if arguments.write else 0
    try:
        if arguments.write:
            build_kernel(KERNEL_WASM)
            print(f"wrote {KERNEL_WASM} ({clang_version('clang')})")
        else:
            print(check_committed())
    except WasmKernelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
