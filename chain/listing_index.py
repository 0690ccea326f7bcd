"""Listing indexes: one state record per listed group of keys, so that a listing's completeness is provable.

The state tree (`sparse_merkle.py`) places keys by `sha256(key)`, so the keys under one prefix (every validator,
a delegator's delegations) are scattered over the tree: no ICS23 proof of "these are all the keys under this
prefix" exists in it. So for each family a query lists, the chain keeps one more record, under
`keys.listing_index_key(prefix)`: the group's entries (the key bytes after the family byte and the group),
ascending, concatenated, each `entry_length` bytes; absent when the group is empty. Its single value is proven
like any record (existence, or non-existence for an empty group), and each entry's record by its own proof, so
a client learns from the index exactly which records the listing holds, and nothing can be left out.

The indexes are not written by the code that writes the records: `update_listing_indexes` derives them at the
end of every block (and of genesis) from the keys whose presence the block changed, so no write path can
forget one. A record only rewritten (a validator's stake) leaves its index alone. Pure: integers and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import keys
from .state import State


@dataclass(frozen=True)
class Family:
    """Keys `prefix || group || entry`: one index per group, listing the entries."""

    prefix: bytes
    group_length: int
    entry_length: int


FAMILIES: dict[bytes, Family] = {family.prefix: family for family in (
    Family(keys.VALIDATOR, 0, 20),                      # /validators: operator
    Family(keys.ACTIVE_VALIDATOR, 0, 20),               # tallies: the validators with power
    Family(keys.SIGNING_INFO, 0, 20),                   # /signing_infos: consensus address
    Family(keys.DELEGATION, 20, 20),                    # /delegations, /rewards: delegator -> validator
    Family(keys.DELEGATION_BY_VALIDATOR, 20, 20),       # /validator_delegations, tallies: validator -> delegator
    Family(keys.UNBONDING_BY_DELEGATOR, 20, 36),        # /unbonding: delegator -> validator, maturity, sequence
    Family(keys.REDELEGATION_BY_DELEGATOR, 20, 36),     # /redelegations: delegator -> validator, maturity, sequence
    Family(keys.MARKET_OPEN_TASK, 0, 8),                # /market/tasks/open: task id
    Family(keys.MARKET_WORKER_UNBONDING_BY_WORKER, 20, 8),  # /market/worker/<address>: worker -> maturity
    Family(keys.MARKET_KEY_DRAWN, 8, 20),               # /market/key_recipients: task id -> operator
    Family(keys.MARKET_REPLAY_GPUS, 0, 20),             # /market/replay_gpus: operator
    Family(keys.GOV_PROPOSAL, 0, 8),                    # /gov/proposals: proposal id
    Family(keys.GOV_DEPOSIT, 8, 20),                    # /gov/proposal/<id>: proposal id -> depositor
    Family(keys.GOV_VOTE, 8, 20),                       # /gov/votes, /gov/tally: proposal id -> voter
)}
"""Every indexed family, by its one-byte prefix. Groups are fixed-length, so an index is a plain concatenation."""


class NotIndexed(ValueError):
    """A prefix that is no indexed family's group: no listing index covers the keys under it."""


def family_of(prefix: bytes) -> Family:
    """The family whose index covers exactly the keys under `prefix`; NotIndexed when none does."""
    family = FAMILIES.get(prefix[:1])
    if family is None or len(prefix) != 1 + family.group_length:
        raise NotIndexed(f"no listing index covers the keys under {prefix.hex()}")
    return family


def decode_entries(family: Family, value: bytes | None) -> list[bytes]:
    """An index record's entries (None: the group is empty); ValueError when it is not whole, ascending entries."""
    if value is None:
        return []
    size = family.entry_length
    if not value or len(value) % size:
        raise ValueError(f"a listing index of {len(value)} bytes is not a whole number of {size}-byte entries")
    entries = [value[i:i + size] for i in range(0, len(value), size)]
    if any(a >= b for a, b in zip(entries, entries[1:])):
        raise ValueError("a listing index's entries are not strictly ascending")
    return entries


def listed_keys(prefix: bytes, value: bytes | None) -> list[bytes]:
    """The state keys an index record under `prefix` lists, ascending (the order `State.iterate` yields)."""
    return [prefix + entry for entry in decode_entries(family_of(prefix), value)]


def indexed_keys(state: State, prefix: bytes) -> list[bytes]:
    """The keys under `prefix`, ascending, from its index alone: one read however many there are, where a query
    needs the keys and not their records (a count, the ids of open tasks before a page of them)."""
    return listed_keys(prefix, state.get(keys.listing_index_key(prefix)))


def update_listing_indexes(state: State) -> None:
    """Bring every index up to date with the keys whose presence changed since `state`'s base (end of a block)."""
    touched: dict[bytes, dict[bytes, bool]] = {}
    for key, present in state.presence_changes(FAMILIES.keys()):
        family = FAMILIES[key[:1]]
        split = 1 + family.group_length
        if len(key) != split + family.entry_length:
            raise ValueError(f"key {key.hex()} does not have its family's length {split + family.entry_length}")
        touched.setdefault(key[:split], {})[key[split:]] = present
    for prefix, changes in sorted(touched.items()):
        index_key = keys.listing_index_key(prefix)
        entries = set(decode_entries(FAMILIES[prefix[:1]], state.get(index_key)))
        entries |= {entry for entry, present in changes.items() if present}
        entries -= {entry for entry, present in changes.items() if not present}
        if entries:
            state.set(index_key, b"".join(sorted(entries)))
        else:
            state.delete(index_key)
