"""Property-based tests of the state machine (hypothesis).

- Random blocks of random transactions, valid and invalid (sends, validator creation, bonds, unbonds,
  multi-message txs, bad nonces, wrong chain ids, garbage) and random misbehavior keep every invariant after
  every block; supply falls exactly by what slashing reports burned; the validator updates of each block are
  exactly the changes of the active set, so CometBFT's view always equals the chain's, and it never empties.
- Transaction decoding and `apply_tx` never raise anything but `ChainError` (or return a failed result) on
  arbitrary bytes or on mutations of a valid transaction.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chain_helpers import ONE_BLOCK_WINDOWS, Chain, test_key
from trolly.chain.app import apply_tx, check_invariants
from trolly.chain.block import BlockContext, Misbehavior
from trolly.chain.codec import U64_MAX
from trolly.chain.errors import ChainError
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.proto.staking_pb2 import MsgBond, MsgCreateValidator, MsgUnbond
from trolly.chain.state import State
from trolly.chain.tx import decode_tx
from trolly.chain.validators import active_validators

TRL = 10**6
CONSENSUS_POOL = [test_key(f"consensus-{i}") for i in range(4)]  # 0 and 1 are the genesis validators' keys
PARAMS = {"staking": {"unbonding_blocks": 4, "max_evidence_age_blocks": 3, "max_validators": 4},
          "market": ONE_BLOCK_WINDOWS}

amounts = st.one_of(
    st.integers(min_value=1, max_value=6 * TRL),
    st.sampled_from([0, 1, TRL - 1, TRL, 3 * TRL, 10 * TRL, 10**12, U64_MAX]),
)
signers = st.integers(min_value=0, max_value=5)  # 0..3 accounts, 4..5 genesis operators
messages = st.one_of(
    st.builds(lambda to, amount: ("send", to, amount), st.integers(0, 6), amounts),
    st.builds(lambda key, stake, moniker: ("create", key, stake, moniker),
              st.integers(0, 3), amounts, st.sampled_from(["v", "node", "validator", "", "x" * 65])),
    st.builds(lambda amount: ("bond", amount), amounts),
    st.builds(lambda amount: ("unbond", amount), amounts),
)
txs = st.builds(
    lambda signer, msgs, fee, defect: ("tx", signer, msgs, fee, defect),
    signers,
    st.lists(messages, min_size=1, max_size=3),
    st.sampled_from([0, 1, 7, 999, 10**13]),
    # mostly well-formed; sometimes a skipped or replayed nonce, another chain's id, or garbage bytes
    st.sampled_from([None] * 12 + ["nonce+1", "nonce-1", "wrong_chain", "garbage", "empty"]),
)
evidence = st.tuples(st.integers(0, 4), st.integers(0, 6))  # consensus key index (4 = unknown), blocks ago
blocks = st.lists(st.tuples(st.lists(txs, max_size=6), st.lists(evidence, max_size=2)), min_size=1, max_size=6)


def build_message(chain: Chain, spec: tuple):
    kind = spec[0]
    if kind == "send":
        _, to, amount = spec
        recipient = (chain.accounts + chain.operators)[to].address if to < 6 else b"\x07" * 19
        return MsgSend(to=recipient, amount=amount)
    if kind == "create":
        _, key, stake, moniker = spec
        return MsgCreateValidator(consensus_pubkey=CONSENSUS_POOL[key].pubkey, stake=stake, moniker=moniker)
    return (MsgBond if kind == "bond" else MsgUnbond)(amount=spec[1])


def build_tx(chain: Chain, spec: tuple) -> bytes:
    _, signer_index, message_specs, fee, defect = spec
    signer = (chain.accounts + chain.operators)[signer_index]
    built = [build_message(chain, m) for m in message_specs]
    if defect == "garbage":
        return chain.tx(signer, *built, fee=fee, nonce=chain.nonce(signer))[3:]
    if defect == "empty":
        return b""
    if defect == "wrong_chain":
        return chain.tx(signer, *built, fee=fee, nonce=chain.nonce(signer), chain_id="another-chain")
    if defect in ("nonce+1", "nonce-1"):
        nonce = max(0, chain.nonce(signer) + (1 if defect == "nonce+1" else -1))
        return chain.tx(signer, *built, fee=fee, nonce=nonce)
    return chain.tx(signer, *built, fee=fee)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks)
def test_random_blocks_keep_every_invariant(block_specs):
    chain = Chain(validators=2, params=PARAMS)  # checks invariants after genesis and after every block
    cometbft_view = {u.pubkey: u.power for u in chain.genesis_validator_updates}
    for tx_specs, evidence_specs in block_specs:
        supply = chain.query("/supply")["supply"]
        misbehavior = tuple(
            Misbehavior(1, test_key("nobody").address if key == 4 else CONSENSUS_POOL[key].address, 1,
                        max(0, chain.height + 1 - ago), 0, 1)
            for key, ago in evidence_specs
        )
        output = chain.block(*(build_tx(chain, spec) for spec in tx_specs), misbehavior=misbehavior)

        burned = sum(int(dict(e.attributes)["burned_stake"]) + int(dict(e.attributes)["burned_unbonding"])
                     for e in output.events if e.type == "slash")
        assert chain.query("/supply")["supply"] == supply - burned

        for update in output.validator_updates:
            assert cometbft_view.get(update.pubkey, 0) != update.power, "an unchanged power was re-sent"
            if update.power:
                cometbft_view[update.pubkey] = update.power
            else:
                cometbft_view.pop(update.pubkey, None)
        assert cometbft_view == {v.consensus_pubkey: v.power for v in active_validators(chain.state)}
        assert cometbft_view, "the validator set became empty (CometBFT would halt)"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_decode_tx_raises_only_chain_errors(raw):
    try:
        decode_tx(raw)
    except ChainError:
        pass


def _valid_tx() -> tuple[Chain, bytes]:
    chain = Chain(validators=1, check_each_block=False)
    alice, bob = chain.accounts[:2]
    return chain, chain.tx(alice, MsgSend(to=bob.address, amount=5), MsgBond(amount=TRL), fee=1)


_CHAIN, _VALID = _valid_tx()
mutations = st.one_of(
    st.binary(max_size=600).map(lambda raw: ("replace", raw)),
    st.tuples(st.integers(0, len(_VALID) - 1), st.integers(1, 255)).map(lambda p: ("flip",) + p),
    st.tuples(st.integers(0, len(_VALID)), st.binary(min_size=1, max_size=8)).map(lambda p: ("insert",) + p),
    st.tuples(st.integers(0, len(_VALID) - 1), st.integers(1, 8)).map(lambda p: ("delete",) + p),
)


def mutate(raw: bytes, mutation: tuple) -> bytes:
    kind = mutation[0]
    if kind == "replace":
        return mutation[1]
    if kind == "flip":
        _, at, mask = mutation
        return raw[:at] + bytes([raw[at] ^ mask]) + raw[at + 1:]
    if kind == "insert":
        _, at, extra = mutation
        return raw[:at] + extra + raw[at:]
    _, at, length = mutation
    return raw[:at] + raw[at + length:]


@settings(max_examples=300, deadline=None)
@given(mutations)
def test_apply_tx_on_mangled_bytes_fails_cleanly_or_applies_whole(mutation):
    raw = mutate(_VALID, mutation)
    state = State(_CHAIN.kv)
    ctx = BlockContext(_CHAIN.env(1))
    result = apply_tx(state, ctx, raw)  # any exception but a handled ChainError fails the test
    if not result.ok:
        assert result.code != 0 and result.log
    check_invariants(state)
