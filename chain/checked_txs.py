"""Remembered stateless checks: a node's memo of the transactions whose decoding and signature it already checked.

A validator meets the same transaction bytes up to five times: CheckTx when they arrive, the mempool re-check
after each Commit, the proposer's PrepareProposal, ProcessProposal and FinalizeBlock. Everything that does
not depend on state (decoding, the canonical-encoding check, chain id, size limits, the ed25519 signature,
each message's own validation) gives the same answer every time, so `CheckedTxs` keeps the outcome of the
latest transactions that *passed* it, up to a bound in bytes, by their exact bytes, with the chain id and auth params the
check ran under. Only the stateful part (nonce, fee, balances, the messages themselves) runs again.

- It is a memo of a pure function: a hit stands for a check that passed on the same bytes under the same
  chain id and params, so results never depend on what it holds, only the speed does; nodes with different
  memos (or none) agree on every result and app hash.
- Failures are not stored: a bad transaction costs its full check every time and cannot fill the memo; nor
  is a transaction that passed these checks but was refused by the stateful ones in `chain.app.check_tx`
  (a wrong nonce, too little to pay the fee), since it was not admitted.
- The decoded messages it hands back are shared between uses; message handlers only read them.
- Bounded in bytes, not entries, oldest first out: each entry is charged `ENTRY_OVERHEAD_BYTES` plus
  `DECODED_BYTES_PER_BYTE` times its transaction's size (the bytes themselves and the decoded copy it keeps),
  so a few maximum-size transactions take the room of many transfers and nothing a sender chooses can grow
  the memo past `capacity_bytes`. A lookup is one call on an `OrderedDict` and every change holds a lock,
  so the ABCI connections' threads, if any, may share it. The adapter also `forget`s a block's transactions once it is
  committed (they will not be checked again: a copy submitted later fails on its nonce), so the memo holds
  about what the mempool holds. For the same reason `chain.app.apply_block` (FinalizeBlock) only looks a
  block's transactions up and stores none it meets for the first time (a block this node never saw in
  CheckTx: catching up, block sync); storing them would only cost time and give the garbage collector more
  to walk.
- What a proposal alone brought is provisional. ProcessProposal remembers the checks it made with
  `provisional=True`: a proposer may fill proposal after proposal with transactions no mempool ever admitted
  and that no block will carry, and those must not push out what the mempool will need. `drop_provisional`
  removes them: the adapter calls it when it rejects a proposal, when the next proposal arrives (the earlier
  one was not decided, or its block's transactions are forgotten at Commit anyway) and at Commit. A
  provisional entry that CheckTx admits (`admit`) stays like any other.

Nothing here is global: the ABCI adapter builds one `CheckedTxs` per application and passes it to
`chain.app` (`check_tx`, `apply_block`, ...); without one, every check runs in full.

While a block executes, an `AnswersAhead` may hold signature answers computed elsewhere (the adapter's
signature checker process); `chain.app` asks it before checking a signature on the spot.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterable, Protocol


class AnswersAhead(Protocol):
    """Signature answers for a block, computed outside the executing thread."""

    def at(self, index: int) -> None:
        """The block's transaction `index` executes next."""

    def answer(self, pubkey: bytes, message_hash: bytes, signature: bytes) -> bool | None:
        """The answer for this check if known (waiting for it if it is on its way), else None."""


CAPACITY_BYTES = 64 * 2**20
"""Bytes the memo may hold, as charged by `entry_cost`: about a full mempool of transfers of the size the
localnet and the benchmarks configure. Beyond it the oldest are checked again in full when next met."""

ENTRY_OVERHEAD_BYTES = 1_024
"""What an entry costs beyond its bytes: the dictionary slot, the key, the context and the decoded
transaction's objects (a transfer's are most of this)."""

DECODED_BYTES_PER_BYTE = 2
"""Bytes charged per transaction byte: the raw key, and the decoded messages' copies of their fields (the
decoded body is never larger than the bytes it came from; a spec is validated, not kept parsed)."""


def entry_cost(raw: bytes) -> int:
    """The bytes an entry for `raw` is charged against the memo's capacity."""
    return ENTRY_OVERHEAD_BYTES + DECODED_BYTES_PER_BYTE * len(raw)


class CheckedTxs:
    """A memo bounded in bytes: transaction bytes -> what its passed stateless check produced."""

    def __init__(self, capacity_bytes: int = CAPACITY_BYTES) -> None:
        if capacity_bytes < ENTRY_OVERHEAD_BYTES:
            raise ValueError("a CheckedTxs memo must hold at least one transaction")
        self._capacity_bytes = capacity_bytes
        self._passed: OrderedDict[bytes, tuple[Any, Any]] = OrderedDict()
        self._held_bytes = 0
        self._provisional: dict[bytes, None] = {}  # insertion-ordered: a proposal's entries, in its order
        self._lock = threading.Lock()

    @property
    def capacity_bytes(self) -> int:
        return self._capacity_bytes

    @property
    def held_bytes(self) -> int:
        """What the entries held now are charged (`entry_cost`), never more than `capacity_bytes`."""
        return self._held_bytes

    def recall(self, raw: bytes, context: Any) -> Any | None:
        """What `remember` stored for these exact bytes under an equal `context`, else None."""
        entry = self._passed.get(raw)
        if entry is None or entry[0] != context:
            return None
        return entry[1]

    def remember(self, raw: bytes, context: Any, checked: Any, provisional: bool = False) -> None:
        """Store the outcome of a check that passed on `raw` under `context` (chain id and params);
        `provisional`: met in a proposal only, dropped by `drop_provisional` (see the module's docstring)."""
        if type(raw) is not bytes:  # a mutable buffer could change after the check
            return
        cost = entry_cost(raw)
        if cost > self._capacity_bytes:
            return
        with self._lock:
            if raw in self._passed:
                self._drop(raw)
            self._passed[raw] = (context, checked)
            self._held_bytes += cost
            if provisional:
                self._provisional[raw] = None
            while self._held_bytes > self._capacity_bytes:
                self._drop(next(iter(self._passed)))

    def admit(self, raw: bytes) -> None:
        """These bytes were admitted to the mempool: their entry, if provisional, is kept like any other."""
        with self._lock:
            self._provisional.pop(raw, None)

    def drop_provisional(self) -> None:
        """Drop every entry only a proposal brought and no CheckTx admitted since."""
        with self._lock:
            for raw in list(self._provisional):
                self._drop(raw)

    def forget(self, raws: Iterable[bytes]) -> None:
        """Drop these transactions' entries, if any (a committed block's: they will not be met again)."""
        passed = self._passed
        with self._lock:
            for raw in raws:
                try:
                    if raw in passed:
                        self._drop(raw)
                except TypeError:  # unhashable (a bytearray): never remembered
                    pass

    def _drop(self, raw: bytes) -> None:
        del self._passed[raw]
        self._provisional.pop(raw, None)
        self._held_bytes -= entry_cost(raw)

    def __contains__(self, raw: object) -> bool:
        """Whether these bytes passed a check still remembered (under any context); checks nothing."""
        try:
            return raw in self._passed
        except TypeError:  # unhashable (a bytearray): never remembered
            return False

    def provisional(self, raw: object) -> bool:
        """Whether these bytes are remembered only for a proposal (`drop_provisional` would drop them)."""
        try:
            return raw in self._provisional
        except TypeError:
            return False

    def __len__(self) -> int:
        return len(self._passed)
