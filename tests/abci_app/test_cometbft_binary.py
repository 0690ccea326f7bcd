"""Finding, checking and installing the CometBFT binary (`trolly.abci_app.cometbft`), and `trolly-node version`.

Stand-in binaries are small shell scripts that print a version, written into the test's own directories; the
last test checks the real install where Go exists, so that CI on a machine with Go never skips the
real-CometBFT tests for want of a binary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trolly.abci_app.cometbft import (
    COMETBFT_VERSION,
    CometbftMissing,
    CometbftWrongVersion,
    find_cometbft,
    find_go,
    install,
    parse_version,
)

NODE = str(Path(sys.executable).parent / "trolly-node")


def stand_in(directory: Path, version_line: str, exit_code: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "cometbft"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\nexit {exit_code}\n")
    path.chmod(0o755)
    return path


def test_versions_are_parsed_with_or_without_a_v_and_build_suffix():
    assert parse_version("0.38.26") == (0, 38, 26)
    assert parse_version("v0.38.17+2b5fa8f") == (0, 38, 17)
    assert parse_version("no version here") is None


def test_the_pinned_release_is_of_the_v038_series():
    assert parse_version(COMETBFT_VERSION)[:2] == (0, 38)


def test_a_cometbft_of_another_version_is_refused_with_the_version_needed(tmp_path):
    stand_in(tmp_path / "bin", "0.37.4")
    with pytest.raises(CometbftWrongVersion) as caught:
        find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "bin"))
    message = str(caught.value)
    assert "0.37.4" in message and "v0.38.x" in message and f"v{COMETBFT_VERSION}" in message
    assert str(tmp_path / "bin" / "cometbft") in message


def test_a_v1_cometbft_is_refused_too(tmp_path):
    stand_in(tmp_path / "bin", "1.0.1")
    with pytest.raises(CometbftWrongVersion, match="needs v0.38.x"):
        find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "bin"))


def test_a_binary_that_prints_no_version_is_refused(tmp_path):
    stand_in(tmp_path / "bin", "", exit_code=3)
    with pytest.raises(CometbftWrongVersion, match="exited 3"):
        find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "bin"))


def test_any_v038_patch_on_path_is_accepted(tmp_path):
    path = stand_in(tmp_path / "bin", "0.38.12")
    found = find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "bin"))
    assert found.path == str(path) and found.version == "0.38.12"


def test_the_venvs_binary_comes_before_path(tmp_path):
    venv = stand_in(tmp_path / "venv-bin", COMETBFT_VERSION)
    stand_in(tmp_path / "bin", "0.38.1")
    assert find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "bin")).path == str(venv)


def test_an_old_binary_first_in_line_is_refused_not_passed_over(tmp_path):
    stand_in(tmp_path / "venv-bin", "0.34.24")
    stand_in(tmp_path / "bin", COMETBFT_VERSION)
    with pytest.raises(CometbftWrongVersion, match="0.34.24"):
        find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "bin"))


def test_no_binary_at_all_says_how_to_get_one(tmp_path):
    with pytest.raises(CometbftMissing) as caught:
        find_cometbft(beside=tmp_path / "venv-bin", search_path=str(tmp_path / "empty"))
    assert "go.dev" in str(caught.value) and "github.com/cometbft/cometbft/releases" in str(caught.value)


# ---------------------------------------------------------------------------------------------- install


def test_install_without_go_says_one_line_and_does_not_fail(tmp_path):
    said: list[str] = []
    assert install(tmp_path / "gobin", None, said.append, search_path=str(tmp_path / "empty")) is None
    assert len(said) == 1 and "no Go toolchain" in said[0] and "solo engine" in said[0]
    assert not (tmp_path / "gobin" / "cometbft").exists()


def test_install_skips_the_build_when_the_pinned_release_is_there(tmp_path):
    stand_in(tmp_path / "gobin", COMETBFT_VERSION)
    failing_go = stand_in(tmp_path / "go-bin", "go would be run")  # never called: the binary is there
    said: list[str] = []
    binary = install(tmp_path / "gobin", str(failing_go), said.append, search_path=str(tmp_path / "empty"))
    assert binary.version == COMETBFT_VERSION and "already installed" in said[0]


def test_install_uses_a_v038_cometbft_already_on_path(tmp_path):
    on_path = stand_in(tmp_path / "bin", "0.38.20")
    said: list[str] = []
    binary = install(tmp_path / "gobin", None, said.append, search_path=str(tmp_path / "bin"))
    assert binary.path == str(on_path) and "found on PATH" in said[0]


def test_install_runs_go_install_of_the_pinned_release_into_gobin(tmp_path):
    """A stand-in `go` records its arguments and GOBIN and writes a binary there, as `go install` does."""
    record = tmp_path / "go-call"
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\necho \"$* GOBIN=$GOBIN\" > {record}\n"
                  f"printf '#!/bin/sh\\necho {COMETBFT_VERSION}\\n' > \"$GOBIN/cometbft\"\nchmod +x \"$GOBIN/cometbft\"\n")
    go.chmod(0o755)
    said: list[str] = []
    binary = install(tmp_path / "gobin", str(go), said.append, search_path=str(tmp_path / "empty"))
    assert record.read_text().strip() == (f"install github.com/cometbft/cometbft/cmd/cometbft@v{COMETBFT_VERSION} "
                                          f"GOBIN={(tmp_path / 'gobin').resolve()}")
    assert binary.version == COMETBFT_VERSION and "installed" in said[-1]


def test_a_failed_build_is_said_and_setup_goes_on(tmp_path):
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\necho 'go: module lookup disabled' >&2\nexit 1\n")
    go.chmod(0o755)
    said: list[str] = []
    assert install(tmp_path / "gobin", str(go), said.append, search_path=str(tmp_path / "empty")) is None
    assert "module lookup disabled" in said[-2] and "build failed" in said[-1]


# ------------------------------------------------------------------------------------- trolly-node version


def test_node_version_names_the_app_and_the_cometbft_found(tmp_path):
    stand_in(tmp_path / "bin", "0.38.26")
    done = subprocess.run([NODE, "version"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("trolly-node 0.") and f"v{COMETBFT_VERSION}" in lines[1]
    assert lines[2].startswith("cometbft: ") and "version 0.38." in lines[2]


def test_the_version_line_says_when_no_cometbft_is_found_or_one_is_refused(tmp_path):
    from trolly.abci_app.cometbft import describe_cometbft

    assert describe_cometbft(tmp_path / "venv-bin", str(tmp_path / "empty")).startswith("cometbft: no `cometbft` found")
    stand_in(tmp_path / "bin", "0.37.4")
    assert "needs v0.38.x" in describe_cometbft(tmp_path / "venv-bin", str(tmp_path / "bin"))


@pytest.mark.skipif(find_go() is None, reason="needs Go to build CometBFT; none on PATH or in /usr/local/go")
def test_where_go_exists_setup_has_installed_the_pinned_cometbft():
    """`make test` runs `make setup` first, which installs CometBFT where Go exists: the real-CometBFT tests
    must then find it rather than skip."""
    binary = find_cometbft()
    assert parse_version(binary.version) == parse_version(COMETBFT_VERSION)
