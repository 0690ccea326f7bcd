"""The per-transaction shortcuts change nothing but speed: CheckTx builds no events and reads the auth params
once, `State.iterate` skips scanning the overlay under prefixes it never wrote, balances change without
`Account` tuples, and the memo's record of a passed check holds the fields the stateful part reads.

Each test compares against the path without the shortcut: a block's `apply_tx` (which records events), a
fresh params read, a merged view built by hand, `get_account`+`set_account`, or a fresh decode.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trolly.chain import app as chain_app
from trolly.chain.accounts import Account, add_balance, get_account, set_account, sub_balance
from trolly.chain.ante import decode_messages
from trolly.chain.block import BlockContext, Event
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.codec import U64_MAX
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.errors import ChainError, InsufficientFunds, InvalidAmount
from trolly.chain.params import AuthParams
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.proto.staking_pb2 import MsgBond, MsgUnbond
from trolly.chain.state import MemoryKV, State
from trolly.chain.tx import build_tx, decode_tx

from chain_helpers import CHAIN_ID, GENESIS_BALANCE, Chain

TRL = 10**6


def mixed_txs(chain: Chain) -> list[bytes]:
    """Transactions that succeed, fail in a message (fee kept), fail the ante, and emit staking events."""
    alice, bob, carol = chain.accounts[:3]
    operator = chain.operators[0]
    return [
        build_tx(alice, CHAIN_ID, 0, 5, [MsgSend(to=bob.address, amount=7)]),
        build_tx(bob, CHAIN_ID, 0, 3, [MsgSend(to=carol.address, amount=GENESIS_BALANCE * 2)]),
        build_tx(carol, CHAIN_ID, 9, 1, [MsgSend(to=alice.address, amount=1)]),
        build_tx(operator, CHAIN_ID, 0, 2, [MsgBond(amount=3 * TRL)]),
        build_tx(operator, CHAIN_ID, 1, 2, [MsgUnbond(amount=TRL), MsgSend(to=alice.address, amount=4)]),
        build_tx(alice, CHAIN_ID, 1, 5, [MsgSend(to=bob.address, amount=1), MsgSend(to=carol.address, amount=2)]),
    ]


def test_check_tx_builds_no_events_yet_answers_and_writes_what_a_block_does():
    chain = Chain(accounts=3)
    checked_state, block_state = State(chain.kv), State(chain.kv)
    block_ctx = BlockContext(chain.env(1))
    outcomes = []
    for raw in mixed_txs(chain):
        checked = chain_app.check_tx(checked_state, chain.env(1), raw)
        marker = block_state.snapshot()
        executed = chain_app.apply_tx(block_state, block_ctx, raw)
        if not executed.ok:  # CheckTx admits whole transactions only, where a block keeps a failed one's fee
            block_state.rollback(marker)
        assert (checked.code, checked.codespace, checked.log) == (executed.code, executed.codespace, executed.log)
        assert checked.events == [] and (executed.events or executed.code != 0)
        assert checked_state.changes() == block_state.changes()
        outcomes.append((executed.ok, {event.type for event in executed.events}))
    assert outcomes == [(True, {"tx", "message", "transfer"}), (False, {"tx"}), (False, set()),
                        (True, {"tx", "message", "bond", "delegate"}),
                        (True, {"tx", "message", "unbond", "undelegate", "transfer"}),
                        (True, {"tx", "message", "transfer"})]


def test_a_block_keeps_every_event_of_a_send_in_order():
    chain = Chain(accounts=2)
    alice, bob = chain.accounts[:2]
    result = chain.deliver(alice, MsgSend(to=bob.address, amount=1234), fee=56)
    sender, recipient = encode_address(alice.address), encode_address(bob.address)
    assert [(event.type, event.attributes) for event in result.events] == [
        ("tx", (("fee", "56"), ("signer", sender), ("nonce", "0"))),
        ("message", (("action", "/trolly.bank.v1.MsgSend"), ("sender", sender))),
        ("transfer", (("sender", sender), ("recipient", recipient), ("amount", "1234"))),
    ]


def test_a_context_that_records_no_events_drops_what_handlers_emit():
    chain = Chain(accounts=1)
    quiet = BlockContext(chain.env(1), record_events=False)
    quiet.emit(Event.of("outside", a=1))
    quiet.tx_events = []
    quiet.emit(Event.of("inside", b=2))
    assert quiet.events == [] and quiet.tx_events == []
    loud = BlockContext(chain.env(1))
    loud.emit(Event.of("outside", a=1))
    assert loud.events == [Event("outside", (("a", "1"),))]


def test_check_tx_with_the_auth_params_given_answers_as_when_it_reads_them():
    chain = Chain(accounts=3, params={"auth": {"min_fee": 4, "fee_per_byte": 0}})
    given_state, read_state = State(chain.kv), State(chain.kv)
    params = AuthParams(min_fee=4, fee_per_byte=0)
    for raw in mixed_txs(chain):
        with_params = chain_app.check_tx(given_state, chain.env(1), raw, auth_params=params)
        without = chain_app.check_tx(read_state, chain.env(1), raw)
        assert (with_params.code, with_params.log) == (without.code, without.log)
    assert given_state.changes() == read_state.changes()


def test_the_stateless_check_with_the_auth_params_given_answers_as_when_it_reads_them():
    chain = Chain(accounts=3, params={"auth": {"min_fee": 4, "fee_per_byte": 0, "max_tx_bytes": 200}})
    params = AuthParams(min_fee=4, fee_per_byte=0, max_tx_bytes=200)
    alice = chain.accounts[0]
    txs = mixed_txs(chain) + [build_tx(alice, CHAIN_ID, 0, 5, [MsgSend(to=alice.address, amount=1)], "m" * 300)]
    answers = [(chain_app.check_tx_stateless_only(raw, CHAIN_ID, State(chain.kv), auth_params=params),
                chain_app.check_tx_stateless_only(raw, CHAIN_ID, State(chain.kv))) for raw in txs]
    assert [(given.code, given.log) for given, _ in answers] == [(read.code, read.log) for _, read in answers]
    assert answers[-1][0].code != 0  # the oversized one is refused either way


# -- State.iterate under prefixes the overlay never wrote -----------------------------------------------------------
KEYS = st.binary(min_size=1, max_size=3).map(lambda tail: bytes([tail[0] % 4]) + tail[1:])
OPERATIONS = st.lists(st.tuples(st.sampled_from(["set", "delete", "snapshot", "rollback"]), KEYS,
                                st.binary(max_size=2)), max_size=40)


@given(committed=st.dictionaries(KEYS, st.binary(min_size=1, max_size=2), max_size=12), operations=OPERATIONS,
       prefix=st.binary(max_size=2).map(lambda p: bytes([p[0] % 5]) + p[1:] if p else p))
def test_iterate_equals_the_merged_view_after_any_writes_and_rollbacks(committed, operations, prefix):
    state = State(MemoryKV(committed))
    merged = dict(committed)
    history: list[tuple[int, dict]] = []
    for operation, key, value in operations:
        if operation == "set":
            state.set(key, value)
            merged[key] = value
        elif operation == "delete":
            state.delete(key)
            merged.pop(key, None)
        elif operation == "snapshot":
            history.append((state.snapshot(), dict(merged)))
        elif history:
            marker, merged = history.pop()
            state.rollback(marker)
    expected = sorted((key, value) for key, value in merged.items() if key.startswith(prefix))
    assert list(state.iterate(prefix)) == expected


def test_iterate_under_an_unwritten_prefix_still_shows_committed_keys():
    state = State(MemoryKV({b"\x17a": b"1", b"\x17b": b"2"}))
    for index in range(50):
        state.set(b"\x01" + bytes([index]), b"x")
    assert list(state.iterate(b"\x17")) == [(b"\x17a", b"1"), (b"\x17b", b"2")]
    marker = state.snapshot()
    state.set(b"\x17c", b"3")
    state.delete(b"\x17a")
    assert list(state.iterate(b"\x17")) == [(b"\x17b", b"2"), (b"\x17c", b"3")]
    state.rollback(marker)
    assert list(state.iterate(b"\x17")) == [(b"\x17a", b"1"), (b"\x17b", b"2")]


# -- add_balance / sub_balance held to get_account + set_account ----------------------------------------------------
def add_balance_reference(state: State, address: bytes, amount: int) -> None:
    if amount == 0:
        return
    account = get_account(state, address)
    if account.balance + amount > U64_MAX:
        raise InvalidAmount("balance would exceed 64 bits")
    set_account(state, address, account._replace(balance=account.balance + amount))


def sub_balance_reference(state: State, address: bytes, amount: int) -> None:
    if amount == 0:
        return
    account = get_account(state, address)
    if account.balance < amount:
        raise InsufficientFunds(f"balance {account.balance}utrl is less than {amount}utrl")
    set_account(state, address, account._replace(balance=account.balance - amount))


@given(start=st.one_of(st.none(), st.tuples(st.integers(0, U64_MAX), st.integers(0, U64_MAX),
                                            st.sampled_from([b"", b"\x07" * 32]))),
       amounts=st.lists(st.tuples(st.booleans(), st.integers(0, U64_MAX)), max_size=6))
def test_add_and_sub_balance_write_and_refuse_as_the_get_set_reference_does(start, amounts):
    address = b"\x05" * 20
    fast, reference = State(MemoryKV()), State(MemoryKV())
    if start is not None:
        for state in (fast, reference):
            set_account(state, address, Account(*start))
    for adding, amount in amounts:
        outcomes = []
        for state, add, sub in ((fast, add_balance, sub_balance),
                                (reference, add_balance_reference, sub_balance_reference)):
            try:
                (add if adding else sub)(state, address, amount)
                outcomes.append(None)
            except ChainError as error:
                outcomes.append((type(error), error.log))
        assert outcomes[0] == outcomes[1]
        assert fast.changes() == reference.changes()


# -- the memo's record of a passed check ------------------------------------------------------------------------
@given(fee=st.integers(0, U64_MAX), nonce=st.integers(0, U64_MAX), memo=st.text(max_size=20),
       amounts=st.lists(st.integers(1, U64_MAX), min_size=1, max_size=3),
       min_fee=st.integers(0, 10**6), fee_per_byte=st.integers(0, 100))
def test_a_remembered_check_holds_the_fields_a_fresh_decode_reads(fee, nonce, memo, amounts, min_fee, fee_per_byte):
    key = PrivateKey(b"\x21" * 32)
    raw = build_tx(key, CHAIN_ID, nonce, fee, [MsgSend(to=b"\x03" * 20, amount=amount) for amount in amounts], memo)
    params = AuthParams(min_fee=min_fee, fee_per_byte=fee_per_byte)
    checks = CheckedTxs()
    first = chain_app.check_stateless(raw, CHAIN_ID, params, checks)
    remembered = chain_app.check_stateless(raw, CHAIN_ID, params, checks)
    fresh = decode_tx(raw)
    assert remembered is first and first.tx.raw == raw
    assert (first.signer, first.fee, first.nonce, first.minimum_fee) == (
        fresh.signer, fresh.body.fee, fresh.body.nonce, params.minimum_fee(len(raw)))
    assert [(route.type_url, message) for route, message in first.messages] == [
        (route.type_url, message) for route, message in decode_messages(fresh, chain_app.MESSAGE_ROUTES)]
