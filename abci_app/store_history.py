"""The store's recent past: what each committed block overwrote, so that a query can read an older height.

The tree (`store.py`) holds only the latest version: proofs are always against the last app hash. Past
heights are kept as an undo log, the way an operator's "keep recent N" pruning keeps versions: every commit
of height H records, for each key H changed, the value it had before H (absent included):

    b"h" + escaped(key) + b"\\x00\\x00" + H (u64 big-endian)  ->  b"\\x01" + old value, or b"\\x00" (was absent)
    b"p" + H (u64 big-endian) + key                           ->  b""  (which keys H changed: for pruning)
    b"m" + b"oldest"                                          ->  the oldest height still readable (u64)

`escaped` doubles every 0x00 into 0x00 0xFF, so one key's records sort together, by height, and the records
of every key starting with a prefix start with that prefix escaped. The value of `key` at height Q (oldest
<= Q <= last) is the old value in its first record above Q, or, with none, its current value.

Pruning deletes the records of heights at or below the new oldest height in the same write batch as the
commit, so the undo log holds at most `keep_recent` heights whatever the chain's age.
"""

from __future__ import annotations

from typing import Callable, Iterator

HISTORY_PREFIX = b"h"
CHANGED_PREFIX = b"p"
OLDEST_KEY = b"m" + b"oldest"
_SEPARATOR = b"\x00\x00"
_WAS_PRESENT = b"\x01"
_WAS_ABSENT = b"\x00"


def escape(key: bytes) -> bytes:
    """`key` with every 0x00 doubled into 0x00 0xFF: order-preserving, and never contains 0x00 0x00."""
    return key.replace(b"\x00", b"\x00\xff")


def unescape(escaped: bytes) -> bytes:
    return escaped.replace(b"\x00\xff", b"\x00")


def height_bytes(height: int) -> bytes:
    return height.to_bytes(8, "big")


def history_key(key: bytes, height: int) -> bytes:
    return HISTORY_PREFIX + escape(key) + _SEPARATOR + height_bytes(height)


def split_history_key(record_key: bytes) -> tuple[bytes, int]:
    """(state key, height) of a history record's LevelDB key."""
    body = record_key[len(HISTORY_PREFIX):-8]
    return unescape(body[:-len(_SEPARATOR)]), int.from_bytes(record_key[-8:], "big")


def old_value(record: bytes) -> bytes | None:
    return record[1:] if record[:1] == _WAS_PRESENT else None


def record_changes(put: Callable[[bytes, bytes], None], read_current: Callable[[bytes], bytes | None],
                   changes: dict[bytes, bytes | None], height: int) -> None:
    """Put, through `put` (a write batch's), the undo records of the block `height` changing `changes`."""
    stamp = height_bytes(height)
    for key in changes:
        previous = read_current(key)
        put(history_key(key, height), _WAS_ABSENT if previous is None else _WAS_PRESENT + previous)
        put(CHANGED_PREFIX + stamp + key, b"")


def prune_heights(db, delete: Callable[[bytes], None], first: int, last: int) -> int:
    """Delete, through `delete`, the undo records of heights `first`..`last`; returns how many were deleted."""
    deleted = 0
    for height in range(first, last + 1):
        stamp = height_bytes(height)
        with db.iterator(prefix=CHANGED_PREFIX + stamp, include_value=False) as keys:
            for index_key in keys:
                delete(history_key(index_key[len(CHANGED_PREFIX) + 8:], height))
                delete(index_key)
                deleted += 1
    return deleted


class HistoricReader:
    """Committed state as it was after block `height`: a `trolly.chain.state.KVReader` over one LevelDB snapshot
    (`source`) whose current values are read with `state_prefix`."""

    def __init__(self, source, state_prefix: bytes, height: int) -> None:
        self._source = source
        self._state_prefix = state_prefix
        self.height = height
        self._after = height_bytes(height + 1)

    def get(self, key: bytes) -> bytes | None:
        start = HISTORY_PREFIX + escape(key) + _SEPARATOR
        with self._source.iterator(start=start + self._after, stop=start + b"\xff" * 8) as records:
            for _, record in records:
                return old_value(record)
        return self._source.get(self._state_prefix + key)

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        values = {key[len(self._state_prefix):]: value
                  for key, value in self._source.iterator(prefix=self._state_prefix + prefix)}
        overridden: set[bytes] = set()
        with self._source.iterator(prefix=HISTORY_PREFIX + escape(prefix)) as records:
            for record_key, record in records:
                key, height = split_history_key(record_key)
                if height > self.height and key not in overridden:
                    overridden.add(key)  # the first record above `height` holds the value at `height`
                    previous = old_value(record)
                    if previous is None:
                        values.pop(key, None)
                    else:
                        values[key] = previous
        for key in sorted(values):
            yield key, values[key]
