"""Crash safety of the store with real processes killed by SIGKILL (the crash contract of docs/architecture.md section 2).

A child process commits a deterministic sequence of blocks (block h is a pure function of h) and is killed
at an arbitrary moment, or kills itself between prepare and commit. Reopening must give a height h and an app
hash equal to the reference root after blocks 1..h, with exactly the state of those blocks: never a half
block.
"""

import inspect
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from trolly.abci_app.store import Store
from trolly.chain.sparse_merkle import MemoryTree


def block(height: int) -> dict[bytes, bytes | None]:
    """The block at `height`, a pure function of it; the child process runs this very function."""
    rng = random.Random(height)
    changes = {}
    for _ in range(rng.randrange(1, 200)):
        key = b"\x01" + rng.randrange(3000).to_bytes(4, "big")
        changes[key] = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(1, 40))
    return changes


CHILD = "import os, random, signal, sys\nfrom trolly.abci_app.store import Store\n\n" + inspect.getsource(block) + r"""
store = Store(sys.argv[1])
stop_before_commit_of = int(sys.argv[2])
height = store.last_height
while True:
    height += 1
    pending = store.prepare(block(height), height)
    if height == stop_before_commit_of:
        print("prepared", height, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    store.commit(pending)
    print("committed", height, flush=True)
"""


def reference_after(height: int) -> MemoryTree:
    tree = MemoryTree()
    for h in range(1, height + 1):
        tree.apply(block(h))
    return tree


def run_child(path, stop_before_commit_of: int, kill_after: float | None):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(stop_before_commit_of)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if kill_after is not None:
        time.sleep(kill_after)
        child.send_signal(signal.SIGKILL)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, stderr.decode()
    text = stdout.decode()
    # The SIGKILL may land in the middle of a report (`print` can write its words one at a time): a last line
    # without its newline was never finished, so it reports nothing.
    return [line.split() for line in text[:text.rfind("\n") + 1].splitlines()]


def check_consistent(path) -> int:
    with Store(path) as store:
        reference = reference_after(store.last_height)
        assert store.last_app_hash == reference.root()
        assert dict(store.reader().iterate(b"")) == reference.items
        return store.last_height


@pytest.mark.slow
def test_kill_between_prepare_and_commit_reopens_at_the_previous_commit(tmp_path):
    lines = run_child(tmp_path / "db", stop_before_commit_of=6, kill_after=None)
    assert lines[-1] == ["prepared", "6"]
    assert check_consistent(tmp_path / "db") == 5


@pytest.mark.slow
def test_kill_at_random_moments_never_leaves_a_half_block(tmp_path):
    rng = random.Random(1)
    last = 0
    for _ in range(4):
        lines = run_child(tmp_path / "db", stop_before_commit_of=-1, kill_after=0.6 + rng.random())
        height = check_consistent(tmp_path / "db")
        committed = [int(n) for word, n in lines if word == "committed"]
        # every commit the child reported is on disk (sync=True); at most the one in flight may also be
        assert height >= (committed[-1] if committed else last)
        assert height <= (committed[-1] if committed else last) + 1
        last = height
    assert last > 0
