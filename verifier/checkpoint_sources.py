"""Checkpoint sources other than a worker's HTTP blob service: in memory and in a directory.

Both behave like `compute.blobs.BlobClient` as far as the verifier is concerned: a listing per (task,
round), blobs by hash, every blob's hash checked on the way out (`BlobHashMismatch`), `BlobNotFound` for
what is absent. The benchmark and tests serve workers' rounds from memory; `trolly-verifier replay
--checkpoints DIR` reads a directory laid out like the blob store (`compute/blobs/store.py`).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Mapping

from trolly.compute.blobs.errors import BlobHashMismatch, BlobNotFound, BlobRejected


class MemorySource:
    """Listings and blobs held in dictionaries."""

    def __init__(self, blobs: Mapping[str, bytes] | None = None,
                 listings: Mapping[tuple[int, int], list[str]] | None = None) -> None:
        self.blobs: dict[str, bytes] = dict(blobs or {})
        self.listings: dict[tuple[int, int], list[str]] = dict(listings or {})

    def add_round(self, task_id: int, round_index: int, listing, blobs: Mapping[str, bytes]) -> None:
        self.listings[(task_id, round_index)] = list(listing)
        self.blobs.update(blobs)

    async def checkpoint_hashes(self, task_id: int, round_index: int) -> list[str]:
        try:
            return list(self.listings[(task_id, round_index)])
        except KeyError:
            raise BlobNotFound(f"no checkpoint listing for task {task_id} round {round_index}") from None

    async def fetch(self, digest: str) -> bytes:
        data = self.blobs.get(digest)
        if data is None:
            raise BlobNotFound(f"blob {digest} not found")
        if hashlib.sha256(data).hexdigest() != digest:
            raise BlobHashMismatch(f"blob {digest}: bytes hash to {hashlib.sha256(data).hexdigest()}")
        return data


class DirectorySource:
    """A blob-store directory: `blobs/<2 hex>/<hex>`, `tasks/<id>/rounds/<r>/checkpoints.json`."""

    def __init__(self, root: str | pathlib.Path) -> None:
        self.root = pathlib.Path(root)

    async def checkpoint_hashes(self, task_id: int, round_index: int) -> list[str]:
        path = self.root / "tasks" / str(task_id) / "rounds" / str(round_index) / "checkpoints.json"
        try:
            listing = json.loads(path.read_text())["checkpoint_hashes"]
        except FileNotFoundError:
            raise BlobNotFound(f"no checkpoint listing at {path}") from None
        except (ValueError, KeyError, TypeError) as error:
            raise BlobRejected(f"{path} is not a checkpoint listing: {error}") from None
        if not isinstance(listing, list) or not all(isinstance(h, str) for h in listing):
            raise BlobRejected(f"{path} is not a list of hashes")
        return listing

    async def fetch(self, digest: str) -> bytes:
        path = self.root / "blobs" / digest[:2] / digest
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise BlobNotFound(f"blob {digest} not found under {self.root}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise BlobHashMismatch(f"{path}: bytes hash to {hashlib.sha256(data).hexdigest()}")
        return data
