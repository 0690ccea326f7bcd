"""The invariants themselves: each one must catch the corruption it guards against (else checking them after
every test would prove nothing). Each case corrupts a healthy committed state in one way, bypassing the
named verbs, and expects `InvariantBroken`."""

from __future__ import annotations

import dataclasses

import pytest

from trolly.chain.errors import Unauthorized

from chain_helpers import ONE_BLOCK_WINDOWS, Chain
from trolly.chain import keys
from trolly.chain.accounts import add_balance, get_supply, set_supply
from trolly.chain.app import check_invariants
from trolly.chain.module import InvariantBroken
from trolly.chain.proto.staking_pb2 import MsgUnbond
from trolly.chain.state import State
from trolly.chain.validators import BONDED_POOL, UNBONDING_POOL, encode_validator, get_validator
from trolly.chain.unbonding import unbonding_entries_of


def healthy_chain() -> Chain:
    chain = Chain(validators=2, params={"staking": {"unbonding_blocks": 5}, "market": ONE_BLOCK_WINDOWS})
    assert chain.deliver(chain.operators[1], MsgUnbond(amount=3 * 10**6)).ok
    return chain


def minted_into(address: bytes):
    def corrupt(state: State, chain: Chain) -> None:
        add_balance(state, address, 5)
        set_supply(state, get_supply(state) + 5)  # keep supply itself consistent: only the pool is wrong
    return corrupt


def rewrite_validator(**changes):
    def corrupt(state: State, chain: Chain) -> None:
        validator = get_validator(state, chain.operators[0].address)
        state.set(keys.validator_key(validator.operator), encode_validator(dataclasses.replace(validator, **changes)))
    return corrupt


def drop_active_index(state: State, chain: Chain) -> None:
    state.delete(keys.active_validator_key(chain.operators[0].address))


def drop_unbonding_index(state: State, chain: Chain) -> None:
    [entry] = unbonding_entries_of(state, chain.operators[1].address)
    state.delete(keys.unbonding_by_operator_key(entry.operator, entry.maturity_height, entry.sequence))


def forget_reported_power(state: State, chain: Chain) -> None:
    state.delete(keys.last_power_key(chain.operators[0].address))


def inflate_supply(state: State, chain: Chain) -> None:
    set_supply(state, get_supply(state) + 1)


CORRUPTIONS = [
    ("tokens appear in the bonded pool", minted_into(BONDED_POOL)),
    ("tokens appear in the unbonding pool", minted_into(UNBONDING_POOL)),
    ("stake changed without moving tokens", rewrite_validator(stake=11 * 10**6)),
    ("power does not match stake", rewrite_validator(power=99)),
    ("jailed validator keeps power", rewrite_validator(jailed=True)),
    ("active index lost", drop_active_index),
    ("unbonding index lost", drop_unbonding_index),
    ("power never reported to CometBFT", forget_reported_power),
    ("supply differs from the sum of balances", inflate_supply),
]


def test_healthy_chain_passes_every_invariant():
    check_invariants(healthy_chain().state)


@pytest.mark.parametrize("case,corrupt", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_invariant_catches(case, corrupt):
    chain = healthy_chain()
    state = chain.state
    corrupt(state, chain)
    with pytest.raises(InvariantBroken):
        check_invariants(state)


def test_send_into_the_bonded_pool_is_refused():
    from trolly.chain.proto.bank_pb2 import MsgSend

    chain = Chain(validators=1)
    result = chain.deliver(chain.accounts[0], MsgSend(to=BONDED_POOL, amount=1))  # raises if it went through
    assert not result.ok
    assert result.code == Unauthorized.code and "module account" in result.log


def test_every_module_account_is_listed_and_refused_as_a_recipient_whatever_was_imported():
    """chain.crypto.MODULE_ACCOUNTS is an explicit list (issue 25 item 5): a fresh interpreter that imports only
    the send message already refuses every module account, and an unlisted name has no module address."""
    import subprocess
    import sys

    from trolly.chain.crypto import MODULE_ACCOUNTS, module_address

    probe = ("from trolly.chain.messages.send import is_module_address\n"
             "from trolly.chain.crypto import MODULE_ACCOUNTS, _derive_module_address\n"
             "print(all(is_module_address(_derive_module_address(name)) for name in MODULE_ACCOUNTS))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "True", result.stderr
    assert set(MODULE_ACCOUNTS) == {"fee_collector", "bonded_pool", "unbonding_pool", "market_escrow",
                                    "gov_deposits", "distribution"}
    with pytest.raises(ValueError, match="not a module account"):
        module_address("treasury")
