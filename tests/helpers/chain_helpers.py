"""A small harness for state-machine tests: genesis, signed transactions and blocks over an in-memory store.

`Chain` runs `init_chain` on a `MemoryKV`, then each `block(...)` executes `apply_block` on a fresh `State`
over the committed store, commits the write set, and (by default) checks every module invariant. It is the
same path the ABCI adapter takes, minus the Merkle store and the socket. Use it through the `chain` and
`make_chain` fixtures of `conftest.py`, which also register the chain so its invariants are checked when the
test ends:

    def test_send_moves_funds(chain):
        alice, bob = chain.accounts[:2]
        result = chain.deliver(alice, MsgSend(to=bob.address, amount=5), fee=1)
        assert result.ok and chain.balance(bob) == GENESIS_BALANCE + 5

    def test_with_two_validators(make_chain):
        chain = make_chain(validators=2, params={"staking": {"unbonding_blocks": 4}, "market": ONE_BLOCK_WINDOWS})

Keys are deterministic (`test_key(name)`), so every run signs the same bytes. Nonces are filled in for you
(the committed nonce plus the transactions already built for the next block); pass `nonce=` to override.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from typing import Iterable

from google.protobuf.message import Message

from trolly.chain.accounts import get_account
from trolly.chain.app import apply_block, check_invariants, init_chain, query
from trolly.chain.block import BlockEnv, BlockOutput, Misbehavior, TxResult, ValidatorUpdate, VoteInfo
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.market.params import MarketParams, longest_reveal_wait
from trolly.chain.rewards import outstanding
from trolly.chain.state import MemoryKV, State
from trolly.chain.tx import build_tx

CHAIN_ID = "trolly-test"
GENESIS_BALANCE = 10**12
"""utrl each genesis account (and each validator operator, before its stake is bonded) starts with."""
VALIDATOR_STAKE = 10 * 10**6
"""Default genesis stake per validator: power 10 with the default power_reduction."""
BLOCK_SECONDS = 1
ONE_BLOCK_WINDOWS = {"verification_window": 1, "reveal_window": 1}
"""Market windows of one block, for tests whose staking unbonds in a few blocks: genesis refuses an
unbonding_blocks that is not more than 2 x verification_window + reveal_window (here 3)."""


def with_market_params(app_state: dict, **market) -> dict:
    """`app_state` (a genesis's) with `market` params set and, when the windows grow past what its unbonding
    outlasts, staking's unbonding_blocks raised to one block more than the longest reveal wait (genesis refuses
    less): for end-to-end tests that lengthen a node's windows."""
    params = app_state.setdefault("params", {})
    merged = {**params.get("market", {}), **market}
    params["market"] = merged
    windows = {name: int(merged[name]) for name in ("verification_window", "reveal_window") if name in merged}
    needed = longest_reveal_wait(dataclasses.replace(MarketParams(), **windows)) + 1
    staking = params.setdefault("staking", {})
    staking["unbonding_blocks"] = max(int(staking.get("unbonding_blocks", 0)), needed)
    return app_state


FREE_AUTH = {"min_fee": 0, "fee_per_byte": 0}
"""Auth params of the harness unless a test gives its own: most tests are about something other than fees,
which tests of the fee rule set explicitly."""


def test_key(name: str) -> PrivateKey:
    """A deterministic ed25519 key for tests."""
    return PrivateKey(hashlib.sha256(b"trolly/test-key/" + name.encode()).digest())


test_key.__test__ = False  # not a pytest test, despite its name


def address_of(who: PrivateKey | bytes) -> bytes:
    return who.address if isinstance(who, PrivateKey) else who


def genesis_app_state(
    accounts: Iterable[tuple[bytes, int]],
    validators: Iterable[tuple[bytes, bytes, int, str]] = (),
    params: dict | None = None,
) -> dict:
    """The `app_state` JSON: accounts as (address, balance), validators as (operator, pubkey, stake, moniker)."""
    params = dict(params or {})
    params.setdefault("auth", dict(FREE_AUTH))
    return {
        "params": params,
        "accounts": [{"address": encode_address(a), "balance": str(b)} for a, b in accounts],
        "validators": [
            {"operator": encode_address(o), "pub_key": base64.b64encode(k).decode(), "stake": str(s), "moniker": m}
            for o, k, s, m in validators
        ],
    }


class Chain:
    """Genesis plus blocks, committed into a MemoryKV. See the module docstring."""

    def __init__(
        self,
        accounts: int = 4,
        validators: int = 1,
        stakes: list[int] | None = None,
        params: dict | None = None,
        app_state: dict | None = None,
        chain_id: str = CHAIN_ID,
        check_each_block: bool = True,
    ) -> None:
        """`accounts` funded keys and `validators` genesis validators (operator keys funded, then bonded with
        `stakes[i]`, default VALIDATOR_STAKE); or a complete `app_state` of your own."""
        self.chain_id = chain_id
        self.check_each_block = check_each_block
        self.accounts = [test_key(f"account-{i}") for i in range(accounts)]
        self.operators = [test_key(f"operator-{i}") for i in range(validators)]
        self.consensus_keys = [test_key(f"consensus-{i}") for i in range(validators)]
        stakes = stakes or [VALIDATOR_STAKE] * validators
        if app_state is None:
            app_state = genesis_app_state(
                [(k.address, GENESIS_BALANCE) for k in self.accounts + self.operators],
                [(o.address, c.pubkey, s, f"validator-{i}") for i, (o, c, s) in
                 enumerate(zip(self.operators, self.consensus_keys, stakes))],
                params,
            )
        self.halted_ns = 0  # added to every later block's time by `halt`
        self.kv = MemoryKV()
        genesis = State(self.kv)
        self.genesis_validator_updates: list[ValidatorUpdate] = init_chain(genesis, self.env(1), app_state)
        self.kv.apply(genesis.changes())
        self.height = 0  # the next block is height 1 (CometBFT's default initial height)
        self.outputs: list[BlockOutput] = []
        self._pending_nonces: dict[bytes, int] = {}
        if check_each_block:
            check_invariants(self.state)

    # -- reading committed state ------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        """A read view of the committed state (writes to it are not committed)."""
        return State(self.kv)

    def query(self, path: str, data: bytes = b""):
        return query(self.state, path, data).value

    def balance(self, who: PrivateKey | bytes) -> int:
        return get_account(self.state, address_of(who)).balance

    def holdings(self, who: PrivateKey | bytes) -> int:
        """Balance plus the fee rewards credited to `who`'s validator and not yet withdrawn: what an operator that
        is its validator's only delegator has earned, commission and rewards together."""
        return self.balance(who) + outstanding(self.state, address_of(who))

    def nonce(self, who: PrivateKey | bytes) -> int:
        return get_account(self.state, address_of(who)).nonce

    # -- building transactions and blocks ---------------------------------------------------------------------
    def env(self, height: int, misbehavior: tuple[Misbehavior, ...] = (), proposer: bytes = b"") -> BlockEnv:
        return BlockEnv(
            chain_id=self.chain_id,
            height=height,
            time_ns=height * BLOCK_SECONDS * 10**9 + self.halted_ns,
            proposer_address=proposer,
            block_hash=hashlib.sha256(b"block" + height.to_bytes(8, "big")).digest(),
            misbehavior=misbehavior,
        )

    def commit_of(self, signed: Iterable[int], listed: Iterable[int] | None = None) -> tuple[VoteInfo, ...]:
        """A last commit listing genesis validators `listed` (default: all), of which those in `signed` signed."""
        signed = set(signed)
        listed = range(len(self.consensus_keys)) if listed is None else listed
        return tuple(VoteInfo(self.consensus_keys[i].address, 10, i in signed) for i in listed)

    def halt(self, seconds: int) -> None:
        """The chain stops for `seconds`: the next block's time is that much later than it would have been."""
        self.halted_ns += seconds * 10**9

    def tx(self, key: PrivateKey, *messages: Message, fee: int = 0, nonce: int | None = None,
           chain_id: str | None = None, memo: str = "") -> bytes:
        """A signed tx; without `nonce`, the signer's next one counting txs already built for this block."""
        if nonce is None:
            nonce = self._pending_nonces.get(key.address, self.nonce(key))
            self._pending_nonces[key.address] = nonce + 1
        return build_tx(key, chain_id or self.chain_id, nonce, fee, list(messages), memo)

    def block(self, *txs: bytes, misbehavior: tuple[Misbehavior, ...] = (), proposer: bytes = b"",
              last_commit: tuple[VoteInfo, ...] = ()) -> BlockOutput:
        """Execute and commit the next block; checks invariants afterwards unless disabled."""
        self.height += 1
        state = State(self.kv)
        env = self.env(self.height, misbehavior, proposer)
        if last_commit:  # subclasses override `env` without it
            env = dataclasses.replace(env, last_commit=last_commit)
        output = apply_block(state, env, list(txs))
        self.kv.apply(state.changes())
        self._pending_nonces.clear()
        self.outputs.append(output)
        if self.check_each_block:
            check_invariants(self.state)
        return output

    def deliver(self, key: PrivateKey, *messages: Message, fee: int = 0) -> TxResult:
        """One tx alone in the next block; returns its result."""
        return self.block(self.tx(key, *messages, fee=fee)).tx_results[0]

    def advance(self, blocks: int, last_commit: tuple[VoteInfo, ...] = ()) -> list[BlockOutput]:
        """Produce `blocks` empty blocks (each carrying `last_commit`, if given)."""
        return [self.block(last_commit=last_commit) for _ in range(blocks)]
