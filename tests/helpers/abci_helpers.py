"""Shared helpers for the ABCI tests: an in-memory store fake, genesis and transaction builders.

`FakeStore` implements the interface of `trolly.abci_app.store.Store` (last_height, last_app_hash, reader,
prepare, commit, prove, close) over a dict, hashing the whole map, so the adapter can be unit-tested without
LevelDB. It is a test fake only; product code always uses the real store. `real_or_fake_store` prefers the
real store when it is importable.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Iterator

from trolly.abci_app.store import HeightPruned
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.ics23_proofs import EXIST_OP_TYPE, NONEXIST_OP_TYPE
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.tx import build_tx

CHAIN_ID = "trolly-test-1"


@dataclass(frozen=True)
class FakePending:
    changes: dict
    height: int
    base_root: bytes
    app_hash: bytes


class FakeReader:
    def __init__(self, items: dict[bytes, bytes]) -> None:
        self._items = items

    def get(self, key: bytes) -> bytes | None:
        return self._items.get(key)

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(k for k in self._items if k.startswith(prefix)):
            yield key, self._items[key]


def hash_items(items: dict[bytes, bytes]) -> bytes:
    digest = hashlib.sha256()
    for key in sorted(items):
        digest.update(len(key).to_bytes(4, "big") + key + len(items[key]).to_bytes(4, "big") + items[key])
    return digest.digest()


class FakeStore:
    """Dict-backed stand-in for the LevelDB store (same interface, no proofs worth verifying)."""

    def __init__(self) -> None:
        self.items: dict[bytes, bytes] = {}
        self.last_height = 0
        self.last_app_hash = hash_items({})
        self.commits = 0
        self.on_pruned = None  # the real store's prune-timing hook; a dict keeps no history to prune

    def reader(self) -> FakeReader:
        return FakeReader(self.items)

    def reader_at(self, height: int) -> FakeReader:
        """Keeps the latest height only, like a `Store` with keep_recent=1."""
        if height != self.last_height:
            raise HeightPruned(f"height {height} is pruned: the oldest height kept is {self.last_height}")
        return self.reader()

    def _apply(self, changes: dict) -> dict[bytes, bytes]:
        items = dict(self.items)
        for key, value in changes.items():
            if value is None:
                items.pop(key, None)
            else:
                items[key] = value
        return items

    def prepare(self, changes: dict, height: int) -> FakePending:
        return FakePending(dict(changes), height, self.last_app_hash, hash_items(self._apply(changes)))

    def commit(self, pending: FakePending) -> None:
        if pending.base_root != self.last_app_hash:
            raise RuntimeError("pending commit was prepared against another root")
        self.items = self._apply(pending.changes)
        self.last_height = pending.height
        self.last_app_hash = pending.app_hash
        self.commits += 1

    def holding_commits(self) -> contextlib.AbstractContextManager:
        """Nothing commits while a query runs here: the tests call the app from one thread."""
        return contextlib.nullcontext()

    def prove(self, key: bytes) -> SimpleNamespace:
        return SimpleNamespace(height=self.last_height, app_hash=self.last_app_hash, value=self.items.get(key),
                               proof_type=EXIST_OP_TYPE if key in self.items else NONEXIST_OP_TYPE,
                               proof=b"fake-proof:" + hashlib.sha256(key).digest())

    def close(self) -> None:
        pass


def key_for(index: int) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"abci-test-key-%d" % index).digest())


def genesis_app_state(funded: dict[PrivateKey, int]) -> dict:
    return {"params": {"auth": {"min_fee": 0, "fee_per_byte": 0}},
            "accounts": [{"address": encode_address(key.address), "balance": str(balance)}
                         for key, balance in funded.items()]}


def genesis_bytes(funded: dict[PrivateKey, int]) -> bytes:
    return json.dumps(genesis_app_state(funded)).encode()


def send_tx(key: PrivateKey, to: bytes, amount: int, nonce: int, chain_id: str = CHAIN_ID, fee: int = 0) -> bytes:
    return build_tx(key, chain_id, nonce, fee, [MsgSend(to=to, amount=amount)])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- a real server process ------------------------------------------------------------------------------------
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402


class ServerProcess:
    """`python -m trolly.abci_app.server` in its own process, over a real LevelDB store."""

    def __init__(self, db: str, address: str, hash_seed: str = "0", timeout: float = 30.0,
                 argv: list[str] | None = None) -> None:
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONUNBUFFERED="1")
        argv = argv or [sys.executable, "-m", "trolly.abci_app.server", "--db", db, "--address", address,
                        "--log-level", "WARNING"]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        deadline = time.monotonic() + timeout
        line = self.process.stdout.readline()  # "ABCI server listening on ..." once bound
        if "listening on" not in line or time.monotonic() > deadline:
            self.process.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.process.stderr.read()}")
        self.address = line.strip().rsplit(" ", 1)[-1]

    @classmethod
    def node_start(cls, home: str, address: str, chain_id: str) -> "ServerProcess":
        """`trolly-node init` then `trolly-node start --home H --abci ADDRESS` (the operator's command)."""
        script = os.path.join(os.path.dirname(sys.executable), "trolly-node")
        if not os.path.exists(home):
            subprocess.run([script, "init", "--home", home, "--chain-id", chain_id], check=True,
                           capture_output=True, text=True)
        return cls("", address, argv=[script, "--log-level", "warning", "start", "--home", home, "--abci", address])

    def stop(self) -> int:
        """SIGTERM, wait; returns the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def stderr(self) -> str:
        return self.process.stderr.read() if self.process.stderr else ""
