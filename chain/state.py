"""The state a block executes against: committed key-value pairs plus this block's pending writes.

`State` reads through to a `KVReader` (the committed store, or any mapping in tests) and keeps every write in
an in-memory overlay; nothing here touches disk. `snapshot`/`rollback` give a failed message an all-or-nothing
effect. `changes()` is the block's write set, which the store hashes in FinalizeBlock and persists in Commit.

Iteration is always in ascending key order over the merged view, so no result depends on dict order.
"""

from __future__ import annotations

from typing import Iterator, Protocol

_MISSING = object()


class KVReader(Protocol):
    """Read access to committed state."""

    def get(self, key: bytes) -> bytes | None: ...

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """All (key, value) pairs whose key starts with `prefix`, in ascending key order."""
        ...


class MemoryKV:
    """A committed store held in a dict: for tests, genesis building and benchmarks."""

    def __init__(self, items: dict[bytes, bytes] | None = None) -> None:
        self.items: dict[bytes, bytes] = dict(items or {})

    def get(self, key: bytes) -> bytes | None:
        return self.items.get(key)

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(k for k in self.items if k.startswith(prefix)):
            yield key, self.items[key]

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self.items.pop(key, None)
            else:
                self.items[key] = value


class State:
    """Committed state plus an overlay of pending writes, with journaled snapshots."""

    def __init__(self, base: KVReader) -> None:
        self._base = base
        self._overlay: dict[bytes, bytes | None] = {}  # None marks a deletion
        self._journal: list[tuple[bytes, object]] = []  # (key, previous overlay entry or _MISSING)
        # First bytes of every key ever put in the overlay (a superset after rollbacks): `iterate` under a
        # prefix none of them starts skips scanning the overlay, which holds a whole block's writes.
        self._heads: set[bytes] = set()

    # -- reads -------------------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        value = self._overlay.get(key, _MISSING)
        return self._base.get(key) if value is _MISSING else value

    def has(self, key: bytes) -> bool:
        return self.get(key) is not None

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Merged view of base and overlay under `prefix`, ascending by key, deletions hidden."""
        if prefix[:1] and prefix[:1] not in self._heads:
            pending = []
        else:
            pending = sorted(k for k in self._overlay if k.startswith(prefix))
        base_iter = iter(self._base.iterate(prefix))
        base_item = next(base_iter, None)
        i = 0
        while base_item is not None or i < len(pending):
            if i < len(pending) and (base_item is None or pending[i] <= base_item[0]):
                key = pending[i]
                i += 1
                if base_item is not None and base_item[0] == key:
                    base_item = next(base_iter, None)
                value = self._overlay[key]
                if value is not None:
                    yield key, value
            else:
                yield base_item
                base_item = next(base_iter, None)

    # -- writes ------------------------------------------------------------------------------------------
    def set(self, key: bytes, value: bytes) -> None:
        if type(value) is not bytes:
            if not isinstance(value, (bytes, bytearray)):
                raise TypeError("state values are bytes")
            value = bytes(value)
        previous = self._overlay.get(key, _MISSING)
        if previous is _MISSING:
            self._heads.add(key[:1])
        self._journal.append((key, previous))
        self._overlay[key] = value

    def delete(self, key: bytes) -> None:
        previous = self._overlay.get(key, _MISSING)
        if previous is _MISSING:
            self._heads.add(key[:1])
        self._journal.append((key, previous))
        self._overlay[key] = None

    # -- snapshots ---------------------------------------------------------------------------------------
    def snapshot(self) -> int:
        """A marker to roll back to; snapshots nest."""
        return len(self._journal)

    def rollback(self, marker: int) -> None:
        """Undo every write made since `snapshot()` returned `marker`."""
        while len(self._journal) > marker:
            key, previous = self._journal.pop()
            if previous is _MISSING:
                del self._overlay[key]
            else:
                self._overlay[key] = previous

    def discard_journal(self) -> None:
        """Forget undo history (after a transaction is final) to keep memory flat over a block."""
        self._journal.clear()

    # -- output ------------------------------------------------------------------------------------------
    def presence_changes(self, heads) -> Iterator[tuple[bytes, bool]]:
        """(key, present now) of each pending key whose first byte is in `heads` and which is present now and
        absent from the base, or the other way round; a value only rewritten is not a change. Ascending by key."""
        wanted = {bytes(head) for head in heads}
        if not wanted & self._heads:
            return
        for key in sorted(k for k in self._overlay if k[:1] in wanted):
            present = self._overlay[key] is not None
            if present != (self._base.get(key) is not None):
                yield key, present

    def changes(self) -> dict[bytes, bytes | None]:
        """The write set against the base: key -> new value, or None for a deletion. Sorted by key."""
        out: dict[bytes, bytes | None] = {}
        for key in sorted(self._overlay):
            value = self._overlay[key]
            if value is None and self._base.get(key) is None:
                continue
            out[key] = value
        return out
