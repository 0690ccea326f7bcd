"""Remembered stateless checks: a node's memo of the transactions whose decoding and signature it already checked.

A validator meets the same transaction bytes up to five times: CheckTx when they arrive, the mempool re-check
after each Commit, the proposer's PrepareProposal, ProcessProposal and FinalizeBlock. Everything that does
not depend on state (decoding, the canonical-encoding check, chain id, size limits, the ed25519 signature,
each message's own validation) gives the same answer every time, so `CheckedTxs` keeps the outcome of the
last `capacity` transactions that *passed* it, by their exact bytes, with the chain id and auth params the
check ran under. Only the stateful part (nonce, fee, balances, the messages themselves) runs again.

- It is a memo of a pure function: a hit stands for a check that passed on the same bytes under the same
  chain id and params, so results never depend on what it holds, only the speed does; nodes with different
  memos (or none) agree on every result and app hash.
- Failures are not stored: a bad transaction costs its full check every time and cannot fill the memo; nor
  is a transaction that passed these checks but was refused by the stateful ones in `chain.app.check_tx`
  (a wrong nonce, too little to pay the fee), since it was not admitted.
- The decoded messages it hands back are shared between uses; message handlers only read them.
- Bounded, oldest first out; every operation is a single call on an `OrderedDict`, so the ABCI connections'
  threads, if any, may share it. The adapter also `forget`s a block's transactions once it is committed
  (they will not be checked again: a copy submitted later fails on its nonce), so the memo holds about what
  the mempool holds. For the same reason `chain.app.apply_block` (FinalizeBlock) only looks a block's
  transactions up and stores none it meets for the first time (a block this node never saw in CheckTx:
  catching up, block sync); storing them would only cost time and give the garbage collector more to walk.

Nothing here is global: the ABCI adapter builds one `CheckedTxs` per application and passes it to
`chain.app` (`check_tx`, `apply_block`, ...); without one, every check runs in full.

While a block executes, an `AnswersAhead` may hold signature answers computed elsewhere (the adapter's
signature checker process); `chain.app` asks it before checking a signature on the spot.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Protocol


class AnswersAhead(Protocol):
    """Signature answers for a block, computed outside the executing thread."""

    def at(self, index: int) -> None:
        """The block's transaction `index` executes next."""

    def answer(self, pubkey: bytes, message_hash: bytes, signature: bytes) -> bool | None:
        """The answer for this check if known (waiting for it if it is on its way), else None."""


CAPACITY = 50_000
"""Passed transactions remembered at most: a full mempool of the size the localnet and the benchmarks
configure (each entry keeps the decoded transaction, so the bound is a bound on memory too). Beyond it the
oldest are checked again in full when next met."""


class CheckedTxs:
    """A bounded memo: transaction bytes -> what its passed stateless check produced."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a CheckedTxs memo must hold at least one transaction")
        self._capacity = capacity
        self._passed: OrderedDict[bytes, tuple[Any, Any]] = OrderedDict()

    def recall(self, raw: bytes, context: Any) -> Any | None:
        """What `remember` stored for these exact bytes under an equal `context`, else None."""
        entry = self._passed.get(raw)
        if entry is None or entry[0] != context:
            return None
        return entry[1]

    def remember(self, raw: bytes, context: Any, checked: Any) -> None:
        """Store the outcome of a check that passed on `raw` under `context` (chain id and params)."""
        if type(raw) is not bytes:  # a mutable buffer could change after the check
            return
        self._passed[raw] = (context, checked)
        if len(self._passed) > self._capacity:
            self._passed.popitem(last=False)

    def forget(self, raws: Iterable[bytes]) -> None:
        """Drop these transactions' entries, if any (a committed block's: they will not be met again)."""
        passed = self._passed
        for raw in raws:
            passed.pop(raw, None)

    def __contains__(self, raw: object) -> bool:
        """Whether these bytes passed a check still remembered (under any context); checks nothing."""
        try:
            return raw in self._passed
        except TypeError:  # unhashable (a bytearray): never remembered
            return False

    def __len__(self) -> int:
        return len(self._passed)
