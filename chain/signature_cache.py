"""Remembered signature checks: the fast path of `crypto.verify_signature` (STYLE 15).

A node checks the signature of the same transaction up to five times: CheckTx when it arrives, the
proposer's PrepareProposal, ProcessProposal, FinalizeBlock, and the mempool re-check after each Commit.
An ed25519 verification (~60 us) is the largest single cost of a transaction, so the last
`CAPACITY` *successful* checks are remembered by (public key, SHA-256 of the message, signature).

- Only successes are stored: invalid signatures cost their full check every time and cannot fill the cache.
- A hit needs the same key, the same signature and a message with the same SHA-256, so it is as strong as
  the check it stands for; a result never depends on what the cache holds, only its speed does.
- Bounded, oldest first out; each operation is a single call on an `OrderedDict`, so threads (the ABCI
  connections) may share it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable

CAPACITY = 100_000
"""Successful checks remembered (about 20 MB): more than a full mempool plus the blocks being decided."""


class VerifiedSignatures:
    """A bounded memo of successful `check(pubkey, message, signature)` results."""

    def __init__(self, check: Callable[[bytes, bytes, bytes], bool], capacity: int = CAPACITY) -> None:
        self._check = check
        self._capacity = capacity
        self._remembered: OrderedDict[tuple[bytes, bytes, bytes], None] = OrderedDict()

    def verify(self, pubkey: bytes, message: bytes, signature: bytes) -> bool:
        key = (pubkey, hashlib.sha256(message).digest(), signature)
        try:
            hash(key)
        except TypeError:  # not bytes (e.g. a bytearray): no memo, the check decides as it always did
            return self._check(pubkey, message, signature)
        if key in self._remembered:
            return True
        if not self._check(pubkey, message, signature):
            return False
        self._remembered[key] = None
        if len(self._remembered) > self._capacity:
            self._remembered.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._remembered)
