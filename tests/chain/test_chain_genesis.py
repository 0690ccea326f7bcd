"""Genesis: funded accounts, params, and initial validators whose stake comes out of their operator's balance."""

from __future__ import annotations

import base64

import pytest

from chain_helpers import GENESIS_BALANCE, VALIDATOR_STAKE, Chain, genesis_app_state, test_key
from trolly.chain.app import init_chain
from trolly.chain.block import BlockEnv, ValidatorUpdate
from trolly.chain.crypto import encode_address
from trolly.chain.errors import ChainError, InsufficientFunds, InvalidAddress, InvalidAmount, InvalidRequest
from trolly.chain.state import MemoryKV, State
from trolly.chain.validators import BONDED_POOL, ConsensusKeyInUse, InvalidConsensusKey, InvalidMoniker, ValidatorExists
from trolly.chain.validators import total_power

TRL = 10**6
OPERATOR, OTHER = test_key("genesis-operator"), test_key("genesis-other")
CONSENSUS, CONSENSUS_2 = test_key("genesis-consensus"), test_key("genesis-consensus-2")


def validator_entry(operator=OPERATOR, pubkey=None, stake=VALIDATOR_STAKE, moniker="v0") -> dict:
    pubkey = CONSENSUS.pubkey if pubkey is None else pubkey
    return {"operator": encode_address(operator.address), "pub_key": base64.b64encode(pubkey).decode(),
            "stake": stake, "moniker": moniker}


def app_state(validators: list[dict], params: dict | None = None, balance: int = GENESIS_BALANCE) -> dict:
    state = genesis_app_state([(OPERATOR.address, balance), (OTHER.address, balance)], params=params)
    state["validators"] = validators
    return state


def run_genesis(app: dict) -> tuple[State, list[ValidatorUpdate]]:
    state = State(MemoryKV())
    return state, init_chain(state, BlockEnv(chain_id="trolly-test", height=1, time_ns=0), app)


def test_genesis_validators_are_bonded_from_their_operator_balance(register_state):
    state, updates = run_genesis(app_state([
        validator_entry(),
        validator_entry(OTHER, CONSENSUS_2.pubkey, "3000000", "v1"),
    ]))
    register_state(state)
    assert updates == sorted([ValidatorUpdate(CONSENSUS.pubkey, 10), ValidatorUpdate(CONSENSUS_2.pubkey, 3)],
                             key=lambda u: u.pubkey)
    from trolly.chain.accounts import get_balance

    assert get_balance(state, OPERATOR.address) == GENESIS_BALANCE - VALIDATOR_STAKE
    assert get_balance(state, OTHER.address) == GENESIS_BALANCE - 3 * TRL
    assert get_balance(state, BONDED_POOL) == VALIDATOR_STAKE + 3 * TRL
    assert total_power(state) == 13


def test_genesis_with_the_documented_json_shape(register_state):
    """The shape agreed with the node CLI and localnet (issue brief), numbers as decimal strings."""
    app = {
        "params": {"auth": {"min_fee": 0}, "staking": {"unbonding_blocks": 10},
                   "market": {"verification_window": 4, "reveal_window": 1}},
        "accounts": [{"address": encode_address(OPERATOR.address), "balance": "1000000000000"}],
        "validators": [{"operator": encode_address(OPERATOR.address),
                        "pub_key": base64.b64encode(CONSENSUS.pubkey).decode(),
                        "stake": "10000000", "moniker": "validator-0"}],
    }
    state, updates = run_genesis(app)
    register_state(state)
    assert updates == [ValidatorUpdate(CONSENSUS.pubkey, 10)]


GENESIS_FAILURES = [
    ("operator without enough balance", app_state([validator_entry()], balance=VALIDATOR_STAKE - 1), InsufficientFunds),
    ("pub_key not base64", app_state([{**validator_entry(), "pub_key": "***"}]), InvalidRequest),
    ("pub_key of 33 bytes", app_state([validator_entry(pubkey=b"\x01" * 33)]), InvalidConsensusKey),
    ("bad operator address", app_state([{**validator_entry(), "operator": "trolly1xyz"}]), InvalidAddress),
    ("zero stake", app_state([validator_entry(stake=0)]), InvalidAmount),
    ("negative stake", app_state([validator_entry(stake=-5)]), InvalidAmount),
    ("stake beyond 64 bits", app_state([validator_entry(stake=str(2**64))]), InvalidAmount),
    ("same operator twice", app_state([validator_entry(), validator_entry(pubkey=CONSENSUS_2.pubkey)]), ValidatorExists),
    ("same consensus key twice", app_state([validator_entry(), validator_entry(OTHER)]), ConsensusKeyInUse),
    ("unknown validator field", app_state([{**validator_entry(), "power": 10}]), InvalidRequest),
    ("unknown staking param", app_state([], params={"staking": {"unbonding_days": 3}}), InvalidRequest),
    ("slash fraction above 100%", app_state([], params={"staking": {"slash_fraction_bps": 10_001}}), InvalidRequest),
    ("power_reduction of zero", app_state([], params={"staking": {"power_reduction": 0}}), InvalidRequest),
    ("power_reduction that could overflow CometBFT's total power",
     app_state([], params={"staking": {"power_reduction": 15}}), InvalidRequest),
    ("moniker with a control character", app_state([validator_entry(moniker="a\x7fb")]), InvalidMoniker),
    ("moniker with a lone surrogate", app_state([validator_entry(moniker="a\ud800")]), InvalidMoniker),
    ("validators not a list", {**app_state([]), "validators": {"a": 1}}, InvalidRequest),
]


@pytest.mark.parametrize("case,app,error", GENESIS_FAILURES, ids=[c[0] for c in GENESIS_FAILURES])
def test_bad_genesis_is_refused_with_a_chain_error(case, app, error):
    with pytest.raises(ChainError) as raised:
        run_genesis(app)
    assert type(raised.value) is error, raised.value


def test_chain_harness_genesis_reports_the_initial_set(make_chain):
    chain = make_chain(validators=3, stakes=[1 * TRL, 2 * TRL, 3 * TRL])
    assert sorted(u.power for u in chain.genesis_validator_updates) == [1, 2, 3]
    assert chain.block().validator_updates == []  # nothing re-sent after genesis


def test_chain_harness_is_deterministic():
    """Two harness runs of the same blocks commit byte-identical stores."""
    from trolly.chain.proto.staking_pb2 import MsgBond

    def run():
        chain = Chain(validators=2)
        chain.deliver(chain.operators[0], MsgBond(amount=TRL), fee=3)
        chain.advance(2)
        return chain.kv.items

    assert run() == run()


@pytest.mark.parametrize("balance", [-5, "-5", 1 << 64, "1.5", 1.5, True])
def test_genesis_refuses_bad_account_balances(balance):
    from trolly.chain.app import init_chain
    from trolly.chain.block import BlockEnv
    from trolly.chain.crypto import encode_address
    from trolly.chain.errors import ChainError
    from trolly.chain.state import MemoryKV, State

    state = State(MemoryKV())
    app_state = {"accounts": [{"address": encode_address(b"\x07" * 20), "balance": balance}]}
    with pytest.raises(ChainError, match="genesis amount"):
        init_chain(state, BlockEnv("c", 1, 0), app_state)
    assert state.changes() == {} or all(not k.startswith(b"\x01") for k in state.changes())


SHORT_UNBONDING = [  # (staking params, market params, the longest wait from a vote to its reveal deadline)
    ({"unbonding_blocks": 210}, {}, 210),  # the market defaults: 2 x 100 + 10
    ({"unbonding_blocks": 10}, {"verification_window": 180, "reveal_window": 10}, 370),  # the localnet's old preset
    ({"unbonding_blocks": 4}, {"verification_window": 1, "reveal_window": 2}, 4),
]


@pytest.mark.parametrize("staking,market,longest", SHORT_UNBONDING, ids=["defaults", "old localnet", "equal"])
def test_genesis_refuses_an_unbonding_that_a_reveal_deadline_can_outlast(staking, market, longest):
    """A lazy verifier's penalty is burned from what it unbonded since its vote, so unbonding must outlast the
    verification window, its one escalation and the reveal window; the error names every value."""
    app = app_state([validator_entry()], params={"staking": staking, "market": market})
    with pytest.raises(InvalidRequest) as raised:
        run_genesis(app)
    windows = {"verification_window": 100, "reveal_window": 10, **market}
    assert (f"staking.unbonding_blocks ({staking['unbonding_blocks']}) must be more than 2 x "
            f"market.verification_window ({windows['verification_window']}) + market.reveal_window "
            f"({windows['reveal_window']}) = {longest}") in str(raised.value)
    staking = {"unbonding_blocks": longest + 1}
    run_genesis(app_state([validator_entry()], params={"staking": staking, "market": market}))  # one more is enough


def test_every_genesis_preset_lets_a_lazy_verifier_s_unbonding_be_penalised(register_state):
    """The chain defaults, the modules' localnet presets, the localnet's genesis (its longer verification
    window) and the `trolly-node dev` genesis all pass init_chain's unbonding check."""
    from trolly.abci_app.home_genesis import build_app_state, dev_genesis
    from trolly.chain.market.params import MarketParams
    from trolly.chain.params import params_to_json
    from trolly.chain.validators import StakingParams
    from trolly.localnet.home_layout import LOCALNET_PARAMS

    presets = {
        "defaults": app_state([validator_entry()]),
        "module localnet presets": app_state([validator_entry()], params={
            "staking": params_to_json(StakingParams.localnet()), "market": params_to_json(MarketParams.localnet())}),
        "localnet": build_app_state({encode_address(OPERATOR.address): GENESIS_BALANCE}, [],
                                    params=dict(LOCALNET_PARAMS)),
        "dev": dev_genesis("trolly-dev", [CONSENSUS.pubkey])["app_state"],
    }
    for app in presets.values():
        state, _ = run_genesis(app)
        register_state(state)
