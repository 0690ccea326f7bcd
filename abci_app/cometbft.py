"""Which CometBFT this node runs on: the pinned release, finding the binary, installing it.

`COMETBFT_VERSION` is the one place the release is pinned: `make setup` installs exactly it (through
`python -m trolly.abci_app.cometbft install`), node homes record it in config.toml, the solo engine reports it
in `/status`, and `find_cometbft` accepts any release of its series (v0.38.x: same ABCI 2.0 wire format,
same file formats), refusing others with the version needed.

Where the binary is looked for, in order: the directory of the running interpreter (the virtualenv's `bin`,
where `make setup` installs it), then `PATH`. The first `cometbft` found is the one used, so an old
binary earlier on the list is refused rather than silently passed over.

Installing follows CometBFT's own docs, `go install github.com/cometbft/cometbft/cmd/cometbft@v<version>`,
with `GOBIN` set to the virtualenv's `bin`; Go keeps its module and build caches (`~/go/pkg/mod`,
`~/.cache/go-build`), so a second setup rebuilds nothing. Without Go, the installer prints one line on how to
get CometBFT and succeeds: the built-in solo engine serves single-validator use meanwhile.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import AbciAppError

COMETBFT_VERSION = "0.38.26"
"""The CometBFT release this project installs and whose file formats and RPC shapes it follows."""

COMETBFT_SERIES = (0, 38)
"""Releases accepted at run time: any v0.38.x patch (ABCI 2.0.0, proto package `tendermint.abci`)."""

COMETBFT_PACKAGE = "github.com/cometbft/cometbft/cmd/cometbft"

GO_FALLBACK_LOCATIONS = ("/usr/local/go/bin/go",)
"""Where the official Go archive installs `go`, for machines whose PATH does not name it."""

HOW_TO_GET = (
    f"install Go (https://go.dev/dl/) and run `make setup` again, or put a cometbft v{COMETBFT_VERSION} binary "
    "(https://github.com/cometbft/cometbft/releases) on PATH"
)


class CometbftError(AbciAppError):
    """No usable `cometbft` binary."""


class CometbftMissing(CometbftError):
    """No `cometbft` in the virtualenv's bin nor on PATH."""


class CometbftWrongVersion(CometbftError):
    """A `cometbft` was found, but not of the v0.38 series (or its version could not be read)."""


@dataclass(frozen=True)
class CometbftBinary:
    path: str
    version: str


def parse_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of `cometbft version` output such as `0.38.26` or `v0.38.26+abc`; None if absent."""
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def binary_version(path: str | os.PathLike, timeout: float = 20.0) -> str:
    """What `<path> version` prints (first line), or raises CometbftWrongVersion if it cannot be run."""
    try:
        done = subprocess.run([str(path), "version"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CometbftWrongVersion(f"cannot run `{path} version`: {exc}") from None
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    if done.returncode != 0 or not lines:
        raise CometbftWrongVersion(f"`{path} version` exited {done.returncode} without a version")
    return lines[0].strip()


def candidate_paths(beside: Path | None = None, search_path: str | None = None) -> list[str]:
    """Where a `cometbft` binary is looked for, in order: `beside` (default: the interpreter's directory, the
    virtualenv's bin), then `search_path` (default: $PATH)."""
    beside = Path(sys.executable).parent if beside is None else Path(beside)
    found = []
    local = beside / "cometbft"
    if local.is_file() and os.access(local, os.X_OK):
        found.append(str(local))
    on_path = shutil.which("cometbft", path=search_path)
    if on_path is not None and os.path.realpath(on_path) not in {os.path.realpath(p) for p in found}:
        found.append(on_path)
    return found


def check_version(path: str, version: str) -> CometbftBinary:
    parsed = parse_version(version)
    if parsed is None or parsed[:2] != COMETBFT_SERIES:
        raise CometbftWrongVersion(
            f"{path} is CometBFT {version!r}, but Trolly needs v{COMETBFT_SERIES[0]}.{COMETBFT_SERIES[1]}.x "
            f"(v{COMETBFT_VERSION}, which `make setup` installs); remove it from PATH or {HOW_TO_GET}"
        )
    return CometbftBinary(path, version)


def find_cometbft(beside: Path | None = None, search_path: str | None = None) -> CometbftBinary:
    """The `cometbft` to run: the first found (see `candidate_paths`), checked to be a v0.38 release."""
    paths = candidate_paths(beside, search_path)
    if not paths:
        where = Path(sys.executable).parent if beside is None else beside
        raise CometbftMissing(f"no `cometbft` found (looked in {where} and PATH): {HOW_TO_GET}")
    return check_version(paths[0], binary_version(paths[0]))


def describe_cometbft(beside: Path | None = None, search_path: str | None = None) -> str:
    """One line for `trolly-node version`: the binary found and its version, or why none is usable."""
    try:
        binary = find_cometbft(beside, search_path)
    except CometbftError as exc:
        return f"cometbft: {exc}"
    return f"cometbft: {binary.path} (version {binary.version})"


# --------------------------------------------------------------------------------------------- install


def find_go() -> str | None:
    found = shutil.which("go")
    if found is not None:
        return found
    for location in GO_FALLBACK_LOCATIONS:
        if os.access(location, os.X_OK):
            return location
    return None


def install(gobin: Path, go: str | None, say=print, search_path: str | None = None) -> CometbftBinary | None:
    """Make `cometbft` v0.38 available: already in `gobin`, already on PATH, or built with `go install`.

    Returns the binary that will be used, or None (with one line said) when there is none and no Go to build
    it; a failed build is said too and also returns None: the solo engine still serves one validator.
    """
    gobin = Path(gobin).resolve()
    target = gobin / "cometbft"
    if target.is_file():
        try:
            version = binary_version(target)
            if parse_version(version) == parse_version(COMETBFT_VERSION):
                say(f"cometbft {version} already installed in {gobin}")
                return CometbftBinary(str(target), version)
        except CometbftError:
            pass  # unreadable: rebuild it
    on_path = shutil.which("cometbft", path=search_path)
    if on_path is not None and Path(on_path).resolve() != target.resolve():
        try:
            binary = check_version(on_path, binary_version(on_path))
            say(f"using cometbft {binary.version} found on PATH at {on_path}")
            return binary
        except CometbftError as exc:
            say(f"ignoring {on_path}: {exc}")
    if go is None:
        say(f"CometBFT not installed (no Go toolchain found): {HOW_TO_GET}; "
            "until then the localnet runs the built-in solo engine (one validator)")
        return None
    say(f"building cometbft v{COMETBFT_VERSION} with {go} into {gobin} (a few minutes the first time)")
    gobin.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([go, "install", f"{COMETBFT_PACKAGE}@v{COMETBFT_VERSION}"],
                          env={**os.environ, "GOBIN": str(gobin)}, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        say(done.stderr.strip()[-3000:])
        say(f"CometBFT build failed (`go install` exited {done.returncode}): {HOW_TO_GET}; "
            "until then the localnet runs the built-in solo engine (one validator)")
        return None
    binary = check_version(str(target), binary_version(target))
    say(f"installed cometbft {binary.version} in {gobin}")
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trolly.abci_app.cometbft",
                                     description="Install or locate the CometBFT release Trolly runs on.")
    commands = parser.add_subparsers(dest="command", required=True)
    install_command = commands.add_parser("install", help=f"install cometbft v{COMETBFT_VERSION} (go install)")
    install_command.add_argument("--gobin", type=Path, default=Path(sys.executable).parent,
                                 help="directory to install into (default: the interpreter's bin)")
    install_command.add_argument("--go", default=None, help="the go command (default: found on PATH)")
    commands.add_parser("version", help="print the pinned release")
    args = parser.parse_args(argv)
    if args.command == "version":
        print(COMETBFT_VERSION)
        return 0
    install(args.gobin, args.go or find_go())
    return 0


if __name__ == "__main__":
    sys.exit(main())
