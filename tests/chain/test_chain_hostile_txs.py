"""A transaction can only fail, never raise: hostile contents end as failed transactions with a code and a log,
the same on every node, whatever the interpreter's settings; the ABCI adapter never answers with an exception.
"""

from __future__ import annotations

import json
import sys

import pytest
from abci_helpers import CHAIN_ID, FakeStore, genesis_bytes, key_for
from google.protobuf.timestamp_pb2 import Timestamp
from market_helpers import MARKET_PARAMS, SPEC, submit_message

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.chain import app as chain_app
from trolly.chain.codec import MAX_JSON_DEPTH, JsonRejected, json_depth, load_untrusted_json
from trolly.chain.errors import UnexpectedFailure
from trolly.chain.gov.errors import InvalidParamValue
from trolly.chain.market.errors import InvalidSpec
from trolly.chain.module import MessageRoute
from trolly.chain.errors import TxDecodeError
from trolly.chain.proto import bank_pb2, gov_pb2, slashing_pb2, tx_pb2
from trolly.chain.signing_info import ValidatorNotJailed
from trolly.chain.state import State
from trolly.chain.tx import build_tx, sign_bytes, type_url_of
from trolly.chain.validators import ValidatorNotFound

ALICE = key_for(1)
SEND_URL = "/" + bank_pb2.MsgSend.DESCRIPTOR.full_name


def hostile_spec(**replace) -> bytes:
    text = json.dumps(SPEC)
    for old, new in replace.items():
        text = text.replace(old, new)
    return text.encode()


HUGE_INTEGER_SPEC = json.dumps(SPEC).replace('"seed": 1234', '"seed": ' + "9" * 5000).encode()
DEEP_SPEC = json.dumps(SPEC).replace('"config": {"hidden": [64]}', '"config": {"hidden": ' + "[" * 5_000
                                     + "]" * 5_000 + "}").encode()


def test_a_spec_with_a_5000_digit_integer_fails_the_submission_with_invalid_spec(make_chain):
    chain = make_chain(params={"market": MARKET_PARAMS})
    requester = chain.accounts[0]
    before = chain.balance(requester)
    result = chain.deliver(requester, submit_message(HUGE_INTEGER_SPEC), fee=7)
    assert (result.code, result.codespace) == (InvalidSpec.code, "market")
    assert "longer than" in result.log
    assert chain.balance(requester) == before - 7  # the fee is charged, the budget is not escrowed
    assert chain.query("/market/tasks")["tasks"] == []


def test_a_spec_nested_5000_deep_fails_the_submission_without_recursing(make_chain):
    chain = make_chain(params={"market": MARKET_PARAMS})
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # a node with a low recursion limit must answer the same
    try:
        result = chain.deliver(chain.accounts[0], submit_message(DEEP_SPEC))
    finally:
        sys.setrecursionlimit(limit)
    assert result.code == InvalidSpec.code and "nested" in result.log


@pytest.mark.parametrize("digits_limit", [640, 0, 100_000])
def test_the_spec_verdict_does_not_depend_on_the_interpreters_integer_digit_limit(make_chain, digits_limit):
    chain = make_chain(params={"market": MARKET_PARAMS})
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(digits_limit)
    try:
        long_but_legal = chain.deliver(chain.accounts[0], submit_message(hostile_spec(**{'"seed": 1234': '"seed": ' + "1" * 18})))
        too_long = chain.deliver(chain.accounts[1], submit_message(HUGE_INTEGER_SPEC))
    finally:
        sys.set_int_max_str_digits(previous)
    assert long_but_legal.ok, long_but_legal.log
    assert too_long.code == InvalidSpec.code


@pytest.mark.parametrize("document, reason", [
    (b'{"a": 1, "a": 2}', "duplicate"),
    (b"[NaN]", "NaN"),
    (b"[Infinity]", "Infinity"),
    (b"[1e39]", "outside"),
    (b"[1e-39]", "outside"),
    (b'["\\ud800"]', "surrogate"),
    (b"\xff\xfe", "UTF-8"),
    (b"[1, 2", "not valid JSON"),
    (b"[" + b"1" * 41 + b"]", "longer than"),
    (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested"),
])
def test_the_bounded_json_reader_refuses_each_hostile_document_with_a_reason(document, reason):
    with pytest.raises(JsonRejected, match=reason):
        load_untrusted_json(document)


def test_brackets_inside_strings_do_not_count_towards_depth():
    assert json_depth(b'{"a": "[[[[{{{{", "b": [["\\"]["]]}') == 3
    assert load_untrusted_json(b'[[1.5, -2, "x"]]') == [[pytest.approx(1.5), -2, "x"]]


def _route_that_raises(monkeypatch, where: str) -> None:
    """Make MsgSend's validation or processing raise a non-chain exception after writing something."""
    route = chain_app.MESSAGE_ROUTES[SEND_URL]

    def validate(message):
        raise ValueError("validation reached a bug")

    def process(state, ctx, signer, message):
        route.process(state, ctx, signer, message)  # its writes must be rolled back
        raise KeyError("processing reached a bug")

    replaced = MessageRoute(route.message_type, validate if where == "validate" else route.validate,
                            process if where == "process" else route.process)
    monkeypatch.setitem(chain_app.MESSAGE_ROUTES, SEND_URL, replaced)


def test_a_message_that_raises_while_processing_fails_with_its_fee_charged_and_writes_rolled_back(make_chain,
                                                                                                  monkeypatch):
    chain = make_chain()
    alice, bob = chain.accounts[:2]
    before_alice, before_bob = chain.balance(alice), chain.balance(bob)
    _route_that_raises(monkeypatch, "process")
    result = chain.deliver(alice, bank_pb2.MsgSend(to=bob.address, amount=5), fee=3)
    assert (result.code, result.codespace) == (UnexpectedFailure.code, "trolly")
    assert "KeyError" in result.log and "processing reached a bug" not in result.log  # no node-specific text
    assert chain.balance(alice) == before_alice - 3 and chain.balance(bob) == before_bob
    assert chain.nonce(alice) == 1


def test_a_message_whose_validation_raises_fails_without_charging_anything(make_chain, monkeypatch):
    chain = make_chain()
    alice, bob = chain.accounts[:2]
    before = chain.balance(alice)
    _route_that_raises(monkeypatch, "validate")
    result = chain.deliver(alice, bank_pb2.MsgSend(to=bob.address, amount=5), fee=3)
    assert result.code == UnexpectedFailure.code and "ValueError" in result.log
    assert chain.balance(alice) == before and chain.nonce(alice) == 0


def started_app() -> TrollyApplication:
    app = TrollyApplication(FakeStore())
    genesis = json.loads(genesis_bytes({ALICE: 10**12}))
    genesis["params"]["market"] = MARKET_PARAMS
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                         app_state_bytes=json.dumps(genesis).encode()))
    return app


def test_the_adapter_answers_check_tx_finalize_and_process_proposal_for_the_hostile_spec_without_raising():
    app = started_app()
    tx = build_tx(ALICE, CHAIN_ID, 0, 0, [submit_message(HUGE_INTEGER_SPEC)])
    check = app.check_tx(abci.RequestCheckTx(tx=tx))
    assert check.code == InvalidSpec.code and check.codespace == "market"
    proposal = app.process_proposal(abci.RequestProcessProposal(height=1, txs=[tx]))
    assert proposal.status == abci.ResponseProcessProposal.ACCEPT  # well-formed; it fails statefully
    block = app.finalize_block(abci.RequestFinalizeBlock(height=1, txs=[tx], time=Timestamp(seconds=1)))
    assert block.tx_results[0].code == InvalidSpec.code
    app.commit(abci.RequestCommit())
    # The mempool still takes transactions after the hostile one.
    assert app.check_tx(abci.RequestCheckTx(tx=build_tx(ALICE, CHAIN_ID, 1, 0, [
        bank_pb2.MsgSend(to=key_for(2).address, amount=1)]))).code == 0


@pytest.mark.parametrize("path", ["/market/task/\u00b2", "/market/task/" + "9" * 5000, "/market/task/1/round/\u0661",
                                  "/market/worker/\udcff", "/account/" + "q" * 10_000, "\x00", "",
                                  "/signing_info/" + "q" * 10_000, "/signing_info/\udcff", "/signing_infos/x"])
def test_a_hostile_query_path_is_answered_with_an_error_code_never_an_exception(path):
    response = started_app().query(abci.RequestQuery(path=path.encode("utf-8", "surrogatepass").decode("utf-8", "replace")))
    assert response.code != 0 and response.log


def test_an_unexpected_error_in_check_tx_leaves_the_mempool_overlay_unchanged(monkeypatch):
    app = started_app()
    ok = build_tx(ALICE, CHAIN_ID, 0, 0, [bank_pb2.MsgSend(to=key_for(2).address, amount=1)])
    assert app.check_tx(abci.RequestCheckTx(tx=ok)).code == 0

    def broken(state, env, raw, *helpers):
        state.set(b"\x00garbage", b"x")
        raise RuntimeError("a bug outside apply_tx")

    monkeypatch.setattr(chain_app, "check_tx", broken)
    response = app.check_tx(abci.RequestCheckTx(tx=ok))
    assert response.code == UnexpectedFailure.code
    mempool, _ = app._mempool_state()
    assert mempool.get(b"\x00garbage") is None


@pytest.mark.parametrize("path", ["/market/task/\u00b2", "/market/task/" + "9" * 5000, "/market/task/1/round/\u0661"])
def test_a_task_query_with_non_ascii_or_huge_digits_is_an_invalid_or_missing_request(path):
    response = started_app().query(abci.RequestQuery(path=path))
    assert response.code != UnexpectedFailure.code and response.code != 0, response.log


@pytest.mark.parametrize("value", ["9" * 5000, "[" * 5000 + "]" * 5000, '"\\ud800"', "1e400", "NaN", "\u0661",
                                   "18446744073709551616", '{"a": 1, "a": 2}'])
def test_a_hostile_param_value_in_a_proposal_fails_with_invalid_param_value_never_raising(make_chain, value):
    """A proposal's value is JSON from a stranger: huge integers, deep nesting, lone surrogates, non-ASCII digits
    and duplicate keys all end as a failed transaction in the gov codespace, in CheckTx and in a block alike."""
    chain = make_chain()
    message = gov_pb2.MsgSubmitProposal(title="t", changes=[gov_pb2.ParamChange(section="market",
                                                                                 key="reveal_window", value=value)])
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        check = chain_app.check_tx(State(chain.kv), chain.env(1), chain.tx(chain.accounts[0], message))
        block = chain.block(chain.tx(chain.accounts[0], message, nonce=0)).tx_results[0]
    finally:
        sys.setrecursionlimit(limit)
    for result in (check, block):
        assert (result.codespace, result.code) == ("gov", InvalidParamValue.code), result.log
    assert chain.query("/gov/proposals")["proposals"] == []


@pytest.mark.parametrize("path", ["/gov/proposal/\u00b2", "/gov/proposal/" + "9" * 5000, "/gov/tally/-1",
                                  "/gov/votes/", "/gov/proposals/1"])
def test_a_hostile_gov_query_is_an_invalid_or_missing_request(path):
    response = started_app().query(abci.RequestQuery(path=path))
    assert response.code not in (0, UnexpectedFailure.code), response.log


def _unjail_with_value(key, value: bytes, nonce: int = 0) -> bytes:
    """A signed tx whose one message claims to be MsgUnjail and carries `value` as its bytes."""
    body = tx_pb2.TxBody(chain_id=CHAIN_ID, nonce=nonce)
    body.messages.add(type_url=type_url_of(slashing_pb2.MsgUnjail()), value=value)
    body_bytes = body.SerializeToString(deterministic=True)
    return tx_pb2.Tx(body_bytes=body_bytes, pubkey=key.pubkey,
                     signature=key.sign(sign_bytes(body_bytes))).SerializeToString(deterministic=True)


@pytest.mark.parametrize("value", [b"\x08\x01", b"\x12\x14" + b"\x00" * 20, b"\xff" * 9, b"\x0a"])
def test_an_unjail_carrying_fields_it_does_not_have_is_refused_before_it_runs(value):
    """MsgUnjail has no fields: bytes smuggled into it (an operator address, say, to unjail someone else's
    validator) are refused as not canonical, or as undecodable, in CheckTx and in the block, never raised."""
    app = started_app()
    tx = _unjail_with_value(ALICE, value)
    check = app.check_tx(abci.RequestCheckTx(tx=tx))
    assert check.code == TxDecodeError.code and check.codespace == "trolly", check.log
    block = app.finalize_block(abci.RequestFinalizeBlock(height=1, txs=[tx], time=Timestamp(seconds=1)))
    assert block.tx_results[0].code == TxDecodeError.code


def test_an_unjail_from_an_account_with_no_validator_or_no_jail_fails_with_a_code(make_chain):
    chain = make_chain(validators=2)
    stranger = chain.deliver(chain.accounts[0], slashing_pb2.MsgUnjail())
    free = chain.deliver(chain.operators[0], slashing_pb2.MsgUnjail())
    assert (stranger.codespace, stranger.code) == ("staking", ValidatorNotFound.code)
    assert "operates no validator" in stranger.log
    assert (free.codespace, free.code) == ("slashing", ValidatorNotJailed.code) and "not jailed" in free.log
