"""The state keys a query's answer depends on, and the state a client rebuilds from their proofs alone.

A query handler reads state through `State.get` and `State.iterate` only, so running it over a
`RecordingReader` names every key its answer depends on: each key it read, and for each prefix it listed the
group's listing index (`listing_index.py`) and every key the listing yielded. The node proves each of those keys
(existence or non-existence); a client checks every proof against the app hash, puts the proven values in a
`ProvenReader` and runs the same handler over it. If the handler reads a key that was not proven, or lists a
prefix whose index was not, the client's run fails (`UnprovenRead`); otherwise its answer is the one the proven
state gives, and the node's answer must equal it, every field. A listing is complete because its index is one
proven record that names every key under the prefix.

A prefix that no listing index covers (a round's commitments, a scan of a whole family) makes the answer
unprovable: `QueryReads.unindexed` names it, and the node answers without a proof. Pure: no IO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from . import keys
from .listing_index import NotIndexed, family_of, listed_keys
from .state import KVReader


class UnprovenRead(Exception):
    """A query read a key (or listed a prefix) that the proofs at hand do not cover."""


@dataclass(frozen=True)
class QueryReads:
    """What one run of a query read: the keys to prove, ascending, and the prefixes no listing index covers."""

    keys: tuple[bytes, ...]
    unindexed: tuple[bytes, ...]


class RecordingReader:
    """A KVReader that passes reads through to `base` and remembers every key an answer depends on."""

    def __init__(self, base: KVReader) -> None:
        self._base = base
        self._keys: set[bytes] = set()
        self._unindexed: set[bytes] = set()

    def get(self, key: bytes) -> bytes | None:
        self._keys.add(key)
        return self._base.get(key)

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        try:
            family_of(prefix)
            self._keys.add(keys.listing_index_key(prefix))
        except NotIndexed:
            self._unindexed.add(prefix)
        for key, value in self._base.iterate(prefix):
            self._keys.add(key)
            yield key, value

    def reads(self) -> QueryReads:
        return QueryReads(tuple(sorted(self._keys)), tuple(sorted(self._unindexed)))


class ProvenReader:
    """A KVReader holding only proven values (None: proven absent); any other read is an UnprovenRead, and a
    listing yields exactly the keys its proven index names."""

    def __init__(self, values: dict[bytes, bytes | None]) -> None:
        self._values = dict(values)

    def get(self, key: bytes) -> bytes | None:
        if key not in self._values:
            raise UnprovenRead(f"the answer depends on key {key.hex()}, which no proof covers")
        return self._values[key]

    def iterate(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        try:
            listed = listed_keys(prefix, self.get(keys.listing_index_key(prefix)))
        except NotIndexed as exc:
            raise UnprovenRead(f"the answer lists the keys under {prefix.hex()}: {exc}") from None
        except ValueError as exc:
            raise UnprovenRead(f"the proven listing index of {prefix.hex()} is malformed: {exc}") from None
        for key in listed:
            value = self.get(key)
            if value is None:
                raise UnprovenRead(f"the listing index of {prefix.hex()} names {key.hex()}, proven absent")
            yield key, value
