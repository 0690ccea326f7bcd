"""Blobs this verifier already fetched and hash-checked, kept by hash so that each is hashed once.

A blob is named by its sha256, so bytes that matched their name once match it forever: the segment checks
and the update check of one worker's round (checkpoints 0 and n serve both when sampled, checkpoint i + 1
of one segment is checkpoint i of the next) take them from here instead of fetching and hashing them again.
Bounded by total bytes, least recently used first out.
"""

from __future__ import annotations

import collections


class VerifiedBlobs:
    def __init__(self, max_bytes: int = 256 * 2**20) -> None:
        self._blobs: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._bytes = 0
        self.max_bytes = max_bytes
        self.hits = 0

    def get(self, digest: str) -> bytes | None:
        data = self._blobs.get(digest)
        if data is not None:
            self._blobs.move_to_end(digest)
            self.hits += 1
        return data

    def put(self, digest: str, data: bytes) -> None:
        """Keep `data`, which the caller checked hashes to `digest` (and will not change: bytes)."""
        if digest in self._blobs or len(data) > self.max_bytes:
            return
        self._blobs[digest] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, dropped = self._blobs.popitem(last=False)
            self._bytes -= len(dropped)

    def clear(self) -> None:
        self._blobs.clear()
        self._bytes = 0
