"""Listing indexes (`trolly.chain.listing_index`): after every block each indexed group's index record names
exactly the keys under it, and no index outlives its group; queries that read an index answer from it."""

from __future__ import annotations

import pytest

from trolly.chain import keys
from trolly.chain.listing_index import FAMILIES, NotIndexed, decode_entries, family_of, update_listing_indexes
from trolly.chain.proto.staking_pb2 import MsgDelegate, MsgUndelegate
from trolly.chain.state import MemoryKV, State


def expected_indexes(items: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The index records the state's keys call for, derived by scanning every key."""
    groups: dict[bytes, list[bytes]] = {}
    for key in items:
        family = FAMILIES.get(key[:1])
        if family is not None:
            split = 1 + family.group_length
            groups.setdefault(keys.listing_index_key(key[:split]), []).append(key[split:])
    return {index: b"".join(sorted(entries)) for index, entries in groups.items()}


def stored_indexes(items: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {key: value for key, value in items.items() if key.startswith(keys.LISTING_INDEX)}


def test_indexes_follow_delegations_made_and_undone_block_by_block(make_chain):
    chain = make_chain(accounts=3, validators=2)
    assert stored_indexes(chain.kv.items) == expected_indexes(chain.kv.items)  # genesis
    operator = chain.operators[0].address
    for account in chain.accounts:
        chain.block(chain.tx(account, MsgDelegate(validator=operator, amount=1_000_000)))
        assert stored_indexes(chain.kv.items) == expected_indexes(chain.kv.items)
    by_validator = chain.kv.items[keys.listing_index_key(keys.DELEGATION_BY_VALIDATOR + operator)]
    assert len(decode_entries(FAMILIES[keys.DELEGATION_BY_VALIDATOR], by_validator)) == 4  # self-bond + 3
    assert chain.query(f"/validator/{chain.query('/validators')[0]['operator']}")["delegators"] >= 1
    for account in chain.accounts:
        chain.block(chain.tx(account, MsgUndelegate(validator=operator, amount=1_000_000)))
        assert stored_indexes(chain.kv.items) == expected_indexes(chain.kv.items)
    mine = keys.listing_index_key(keys.DELEGATION + chain.accounts[0].address)
    assert mine not in chain.kv.items  # an emptied group leaves no index behind


def test_a_rewritten_record_leaves_its_index_alone_and_a_deleted_one_leaves_it():
    base = MemoryKV()
    state = State(base)
    state.set(keys.validator_key(b"\x01" * 20), b"a")
    state.set(keys.validator_key(b"\x02" * 20), b"b")
    update_listing_indexes(state)
    base.apply(state.changes())
    index = keys.listing_index_key(keys.VALIDATOR)
    assert base.items[index] == b"\x01" * 20 + b"\x02" * 20
    state = State(base)
    state.set(keys.validator_key(b"\x01" * 20), b"changed")
    assert list(state.presence_changes(FAMILIES)) == []
    state.delete(keys.validator_key(b"\x02" * 20))
    update_listing_indexes(state)
    assert state.get(index) == b"\x01" * 20


def test_a_key_of_the_wrong_length_in_an_indexed_family_is_a_bug_not_an_index():
    state = State(MemoryKV())
    state.set(keys.VALIDATOR + b"short", b"x")
    with pytest.raises(ValueError, match="does not have its family's length"):
        update_listing_indexes(state)


def test_only_a_whole_group_prefix_is_indexed():
    assert family_of(keys.DELEGATION + b"\x01" * 20).entry_length == 20
    for prefix in (keys.DELEGATION, keys.DELEGATION + b"\x01" * 19, keys.MARKET_COMMIT + b"\x00" * 16):
        with pytest.raises(NotIndexed):
            family_of(prefix)


def test_a_malformed_index_record_is_refused():
    family = FAMILIES[keys.VALIDATOR]
    with pytest.raises(ValueError, match="whole number"):
        decode_entries(family, b"\x01" * 21)
    with pytest.raises(ValueError, match="ascending"):
        decode_entries(family, b"\x02" * 20 + b"\x01" * 20)
