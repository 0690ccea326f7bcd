"""Fee distribution: the whole fee collector paid to active validators by power, exact to the utrl; of each
validator's share, the commission to its operator at once and the rest to its delegators' pending rewards."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chain_helpers import GENESIS_BALANCE, genesis_app_state, test_key
from trolly.chain.ante import FEE_COLLECTOR
from trolly.chain.block import Misbehavior
from trolly.chain.codec import U64_MAX
from trolly.chain.crypto import encode_address
from trolly.chain.modules.distribution import split_by_power
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.rewards import outstanding
from trolly.chain.validators import Validator

TRL = 10**6


def validators_with(powers: list[int]) -> list[Validator]:
    """Validators with operator addresses 0x01.., 0x02.. in the order given."""
    return [Validator(bytes([i + 1]) * 20, bytes(32), p * TRL, p, f"v{i}") for i, p in enumerate(powers)]


# (amount, powers, expected shares). Remainders go one utrl each by descending power, then ascending operator.
SPLIT_VECTORS = [
    (0, [1, 2], [0, 0]),
    (1, [1, 1], [1, 0]),
    (1, [1, 2], [0, 1]),
    (10, [1, 1, 1], [4, 3, 3]),
    (100, [1, 2, 3], [16, 33, 51]),
    (7, [5], [7]),
    (2, [3, 3, 3], [1, 1, 0]),
    (10**18, [1, 1, 1], [333333333333333334, 333333333333333333, 333333333333333333]),
    (5, [2, 7, 7], [0, 3, 2]),
]


@pytest.mark.parametrize("amount,powers,expected", SPLIT_VECTORS)
def test_split_by_power_vectors(amount, powers, expected):
    shares = [share for _, share in split_by_power(amount, validators_with(powers))]
    assert shares == expected
    assert sum(shares) == amount


def pending(chain, who) -> int:
    return chain.query(f"/rewards/{encode_address(who.address)}")["total"]


def earned(chain, who, balance_before: int) -> int:
    """What a sole-delegator operator got from fees: commission in its balance plus its pending rewards."""
    return chain.balance(who) - balance_before + pending(chain, who)


def test_fees_of_a_block_go_to_validators_by_power_exactly(make_chain):
    chain = make_chain(validators=3, stakes=[1 * TRL, 2 * TRL, 3 * TRL])
    before = [chain.balance(o) for o in chain.operators]
    alice, bob = chain.accounts[:2]
    output = chain.block(
        chain.tx(alice, MsgSend(to=bob.address, amount=1), fee=60),
        chain.tx(bob, MsgSend(to=alice.address, amount=1), fee=40),
    )
    commission = [chain.balance(o) - b for o, b in zip(chain.operators, before)]
    assert commission == [1, 3, 5]  # the default 10% commission of each share, rounded down
    credited = [outstanding(chain.state, o.address) for o in chain.operators]
    assert [c + r for c, r in zip(commission, credited)] == [16, 33, 51]
    # A withdrawal rounds down by less than 1 utrl: 46 utrl over 3,000,000 shares claims 45.99.. -> 45.
    assert [pending(chain, o) for o in chain.operators] == [15, 30, 45]  # 100 * (1,2,3) // 6 = (16,33,50), the remainder 1 to the largest power
    assert chain.balance(FEE_COLLECTOR) == 0
    rewards = {dict(e.attributes)["operator"]: int(dict(e.attributes)["amount"]) for e in output.events if e.type == "reward"}
    assert sorted(rewards.values()) == [16, 33, 51]
    assert ("distribution", (("amount", "100"), ("validators", "3"))) in [(e.type, e.attributes) for e in output.events]


def test_fee_of_a_failed_message_is_distributed_too(chain):
    alice, bob = chain.accounts[:2]
    operator_before = chain.balance(chain.operators[0])
    result = chain.deliver(alice, MsgSend(to=bob.address, amount=GENESIS_BALANCE * 2), fee=9)
    assert not result.ok
    assert chain.balance(chain.operators[0]) - operator_before + outstanding(chain.state, chain.operators[0].address) == 9


def test_block_without_fees_distributes_nothing(chain):
    output = chain.block()
    assert [e.type for e in output.events if e.type in ("reward", "distribution")] == []


def test_jailed_validator_gets_no_fees(make_chain):
    chain = make_chain(validators=2)
    jailed, honest = chain.operators[1], chain.operators[0]
    evidence = Misbehavior(1, chain.consensus_keys[1].address, 10, 1, 0, 20)
    chain.block(misbehavior=(evidence,))
    before = (chain.balance(jailed), chain.balance(honest))
    chain.deliver(chain.accounts[0], MsgSend(to=chain.accounts[1].address, amount=1), fee=11)
    assert earned(chain, jailed, before[0]) == 0
    assert chain.balance(honest) - before[1] + outstanding(chain.state, honest.address) == 11


def test_fees_wait_in_the_collector_without_validators(make_chain):
    alice, bob = test_key("account-0"), test_key("account-1")
    chain = make_chain(app_state=genesis_app_state([(alice.address, 1000), (bob.address, 1000)]))
    output = chain.block(chain.tx(alice, MsgSend(to=bob.address, amount=1), fee=5))
    assert chain.balance(FEE_COLLECTOR) == 5
    assert "distribution_deferred" in [e.type for e in output.events]
    assert chain.genesis_validator_updates == []


@settings(max_examples=200, deadline=None)
@given(st.integers(0, U64_MAX), st.lists(st.integers(1, 10**12), min_size=1, max_size=30))
def test_split_by_power_is_exact_and_fair(amount, powers):
    validators = validators_with(powers)
    shares = split_by_power(amount, validators)
    assert sum(share for _, share in shares) == amount
    total = sum(powers)
    for validator, share in shares:
        floor = amount * validator.power // total
        assert floor <= share <= floor + 1
    # more power never means a smaller share
    assert all(a_share <= b_share for a, a_share in shares for b, b_share in shares if a.power < b.power)
