"""Storage key prefixes: one byte each, no two alike, so no two modules' records can ever share a key.

Delegation and governance were built on separate branches that both took 0x40..; merged, one module's records
would have been read as the other's. This test fails on such a merge."""

from __future__ import annotations

from trolly.chain import keys


def prefixes() -> dict[str, bytes]:
    return {name: value for name, value in vars(keys).items() if name.isupper() and isinstance(value, bytes)}


def test_every_prefix_is_one_byte_and_no_two_share_one():
    found = prefixes()
    assert all(len(value) == 1 for value in found.values()), {n: v for n, v in found.items() if len(v) != 1}
    by_value: dict[bytes, list[str]] = {}
    for name, value in found.items():
        by_value.setdefault(value, []).append(name)
    assert {v: n for v, n in by_value.items() if len(n) > 1} == {}


def test_each_module_keeps_to_its_range():
    """The ranges the comments of chain/keys.py announce, so that a new prefix lands where it is looked for."""
    ranges = {"MARKET_": range(0x20, 0x40), "GOV_": range(0x40, 0x50)}
    delegation = {"DELEGATION", "DELEGATION_BY_VALIDATOR", "UNBONDING_BY_DELEGATOR", "REDELEGATION",
                  "REDELEGATION_BY_SOURCE", "REDELEGATION_BY_DELEGATOR", "REWARDS_CURRENT", "REWARDS_HISTORICAL",
                  "REWARDS_OUTSTANDING", "COMMUNITY_POOL"}
    for name, value in prefixes().items():
        for start, allowed in ranges.items():
            if name.startswith(start):
                assert value[0] in allowed, name
        if name in delegation:
            assert value[0] in range(0x50, 0x60), name
