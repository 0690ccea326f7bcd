"""Remembered signature checks: the fast path of `crypto.verify_signature`.

A node checks the signature of the same transaction up to five times: CheckTx when it arrives, the
proposer's PrepareProposal, ProcessProposal, FinalizeBlock, and the mempool re-check after each Commit.
An ed25519 verification (~60 us) is the largest single cost of a transaction, so the last
`CAPACITY` *successful* checks are remembered by (public key, SHA-256 of the message, signature).

- Only successes are stored: invalid signatures cost their full check every time and cannot fill the cache.
- A hit needs the same key, the same signature and a message with the same SHA-256, so it is as strong as
  the check it stands for; a result never depends on what the cache holds, only its speed does.
- Bounded, oldest first out; each operation is a single call on an `OrderedDict`, so threads (the ABCI
  connections) may share it.

While a block executes, `ahead` may hold answers computed elsewhere: the ABCI adapter's helper process
checks most of a block's signatures on another core while the block executes
(`trolly.abci_app.signature_checker`); a miss in the memo asks it before checking on the spot.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable, Protocol


class AnswersAhead(Protocol):
    """Signature answers for a block, computed outside the executing thread."""

    def at(self, index: int) -> None:
        """The block's transaction `index` executes next."""

    def answer(self, pubkey: bytes, message_hash: bytes, signature: bytes) -> bool | None:
        """The answer for this check if known (waiting for it if it is on its way), else None."""

CAPACITY = 100_000
"""Successful checks remembered (about 20 MB): more than a full mempool plus the blocks being decided."""


class VerifiedSignatures:
    """A bounded memo of successful `check(pubkey, message, signature)` results."""

    def __init__(self, check: Callable[[bytes, bytes, bytes], bool], capacity: int = CAPACITY) -> None:
        self._check = check
        self._capacity = capacity
        self._remembered: OrderedDict[tuple[bytes, bytes, bytes], None] = OrderedDict()
        self.ahead: AnswersAhead | None = None

    def verify(self, pubkey: bytes, message: bytes, signature: bytes) -> bool:
        key = (pubkey, hashlib.sha256(message).digest(), signature)
        try:
            hash(key)
        except TypeError:  # not bytes (e.g. a bytearray): no memo, the check decides as it always did
            return self._check(pubkey, message, signature)
        if key in self._remembered:
            return True
        answer = None if self.ahead is None else self.ahead.answer(*key)
        if answer is None:
            answer = self._check(pubkey, message, signature)
        if not answer:
            return False
        self._remembered[key] = None
        if len(self._remembered) > self._capacity:
            self._remembered.popitem(last=False)
        return True

    def remembers(self, pubkey: bytes, message: bytes, signature: bytes) -> bool:
        """Whether this exact check already succeeded and is still remembered; checks nothing."""
        try:
            return (pubkey, hashlib.sha256(message).digest(), signature) in self._remembered
        except TypeError:  # not bytes: never remembered (see `verify`)
            return False

    def __len__(self) -> int:
        return len(self._remembered)
