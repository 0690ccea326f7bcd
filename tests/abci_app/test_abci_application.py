"""The ABCI adapter over an in-memory store fake: each method's contract, and bad input through it."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from abci_helpers import CHAIN_ID, FakeStore, genesis_bytes, key_for, send_tx
from google.protobuf.timestamp_pb2 import Timestamp

from trolly.abci_app.application import (
    APP_VERSION,
    RETAIN_HEIGHT,
    InvalidGenesis,
    ProtocolViolation,
    TrollyApplication,
)
from trolly.abci_app.codes import error_code, registered_codes
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.proto.tendermint.types import validator_pb2
from trolly.chain import app as chain_app
from trolly.chain import errors
from trolly.chain.accounts import Account, encode_account
from trolly.chain.crypto import encode_address
from trolly.chain.keys import account_key
from trolly.chain.ics23_proofs import EXIST_OP_TYPE
from trolly.chain.proto import tx_pb2
from trolly.chain.state import State
from trolly.chain.tx import sign_bytes

ALICE, BOB, CAROL = key_for(1), key_for(2), key_for(3)
START = 1_000_000


def started(funded=None) -> tuple[TrollyApplication, FakeStore]:
    store = FakeStore()
    app = TrollyApplication(store)
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                         app_state_bytes=genesis_bytes(funded or {ALICE: START, BOB: START})))
    return app, store


def finalize(app, height, txs, time_s=1_700_000_000):
    return app.finalize_block(abci.RequestFinalizeBlock(height=height, txs=txs, time=Timestamp(seconds=time_s)))


def commit_block(app, height, txs):
    response = finalize(app, height, txs)
    app.commit(abci.RequestCommit())
    return response


def balance(app, key) -> dict:
    response = app.query(abci.RequestQuery(path=f"/account/{encode_address(key.address)}"))
    assert response.code == 0, response.log
    return json.loads(response.value)


@pytest.fixture(autouse=True)
def invariants_hold_on_every_store():
    """After each test, every store it committed satisfies the chain invariants."""
    created: list[FakeStore] = []
    original = FakeStore.__init__

    def tracking_init(self):
        original(self)
        created.append(self)

    FakeStore.__init__ = tracking_init
    try:
        yield
    finally:
        FakeStore.__init__ = original
    for store in created:
        chain_app.check_invariants(State(store.reader()))


# -- Info, InitChain, Commit: the crash-recovery contract ---------------------------------------------------------
def test_info_on_a_new_store_reports_height_zero():
    info = TrollyApplication(FakeStore()).info(abci.RequestInfo(version="0.38.17"))
    assert (info.data, info.app_version, info.last_block_height, info.last_block_app_hash) == ("trolly", APP_VERSION,
                                                                                               0, b"")
    assert info.version


def test_init_chain_returns_genesis_hash_but_writes_nothing():
    store = FakeStore()
    app = TrollyApplication(store)
    response = app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, app_state_bytes=genesis_bytes({ALICE: 5})))
    assert store.commits == 0 and store.items == {}
    assert len(response.app_hash) == 32 and response.app_hash != store.last_app_hash
    assert app.info(abci.RequestInfo()).last_block_height == 0


def test_genesis_is_persisted_with_block_one_and_chain_id_survives_restart():
    app, store = started()
    first = commit_block(app, 1, [])
    assert store.last_height == 1 and store.last_app_hash == first.app_hash
    assert balance(app, ALICE)["balance"] == START
    restarted = TrollyApplication(store)  # no hint: the chain id comes from committed state
    info = restarted.info(abci.RequestInfo())
    assert (info.last_block_height, info.last_block_app_hash) == (1, first.app_hash)
    tx = send_tx(ALICE, CAROL.address, 10, 0)
    assert restarted.check_tx(abci.RequestCheckTx(tx=tx)).code == 0


def test_crash_before_block_one_commit_means_init_chain_again_with_same_hash():
    store = FakeStore()
    request = abci.RequestInitChain(chain_id=CHAIN_ID, app_state_bytes=genesis_bytes({ALICE: 7}))
    first = TrollyApplication(store).init_chain(request)
    crashed_then_restarted = TrollyApplication(store)
    assert crashed_then_restarted.info(abci.RequestInfo()).last_block_height == 0
    assert crashed_then_restarted.init_chain(request).app_hash == first.app_hash


def test_finalize_block_is_pure_and_writes_nothing():
    app, store = started()
    txs = [send_tx(ALICE, CAROL.address, 10, 0)]
    first = finalize(app, 1, txs)
    assert store.commits == 0
    again = finalize(app, 1, txs)
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
    # A different app instance over the same committed state (a restart) agrees too.
    other = TrollyApplication(store)
    other.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                           app_state_bytes=genesis_bytes({ALICE: START, BOB: START})))
    assert finalize(other, 1, txs).app_hash == first.app_hash


def test_finalize_block_reports_results_events_and_app_hash():
    app, _ = started()
    response = finalize(app, 1, [send_tx(ALICE, CAROL.address, 10, 0), b"garbage"])
    ok, bad = response.tx_results
    assert ok.code == 0 and bad.code == errors.TxDecodeError.code and bad.codespace == "trolly" and bad.log
    transfer = [e for e in ok.events if e.type == "transfer"][0]
    assert {(a.key, a.value) for a in transfer.attributes} >= {("amount", "10"),
                                                                ("recipient", encode_address(CAROL.address))}
    assert all(a.index for e in ok.events for a in e.attributes)
    assert len(response.app_hash) == 32


def test_commit_returns_retain_height_and_requires_finalize_block():
    app, _ = started()
    with pytest.raises(ProtocolViolation):
        app.commit(abci.RequestCommit())
    finalize(app, 1, [])
    assert app.commit(abci.RequestCommit()).retain_height == RETAIN_HEIGHT == 0
    with pytest.raises(ProtocolViolation):
        app.commit(abci.RequestCommit())


def test_finalize_block_refuses_a_height_out_of_order():
    app, _ = started()
    with pytest.raises(ProtocolViolation):
        finalize(app, 2, [])
    with pytest.raises(ProtocolViolation):
        finalize(TrollyApplication(FakeStore()), 1, [])  # before InitChain


def test_invalid_genesis_is_refused():
    app = TrollyApplication(FakeStore())
    with pytest.raises(InvalidGenesis):
        app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, app_state_bytes=b"{not json"))
    with pytest.raises(InvalidGenesis):
        app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, app_state_bytes=b"[1]"))
    with pytest.raises(InvalidGenesis):
        app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, app_state_bytes=json.dumps(
            {"accounts": [{"address": "trolly1bad", "balance": "5"}]}).encode()))


def test_a_genesis_account_key_of_another_address_fails_init_chain_with_nothing_stored():
    store = FakeStore()
    app = TrollyApplication(store)
    app_state = json.loads(genesis_bytes({ALICE: START}))
    app_state["accounts"][0]["pub_key"] = base64.b64encode(BOB.pubkey).decode()
    with pytest.raises(InvalidGenesis, match=f"is the key of {encode_address(BOB.address)}, not of this address"):
        app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, app_state_bytes=json.dumps(app_state).encode()))
    assert store.items == {} and store.last_height == 0
    with pytest.raises(ProtocolViolation):
        finalize(app, 1, [])  # the node cannot go on from a refused genesis


def test_finalize_block_passes_votes_and_misbehavior_to_the_chain(monkeypatch):
    app, _ = started()
    seen = {}

    def spy(state, env, txs, *helpers):
        seen["env"] = env
        return original(state, env, txs, *helpers)

    original = chain_app.apply_block
    monkeypatch.setattr(chain_app, "apply_block", spy)
    request = abci.RequestFinalizeBlock(
        height=1, time=Timestamp(seconds=10, nanos=5), hash=b"h" * 32, proposer_address=b"p" * 20,
        decided_last_commit=abci.CommitInfo(votes=[
            abci.VoteInfo(validator=abci.Validator(address=b"a" * 20, power=3),
                          block_id_flag=validator_pb2.BLOCK_ID_FLAG_COMMIT),
            abci.VoteInfo(validator=abci.Validator(address=b"b" * 20, power=4),
                          block_id_flag=validator_pb2.BLOCK_ID_FLAG_ABSENT)]),
        misbehavior=[abci.Misbehavior(type=abci.DUPLICATE_VOTE, validator=abci.Validator(address=b"c" * 20, power=9),
                                      height=1, time=Timestamp(seconds=9), total_voting_power=16)],
    )
    app.finalize_block(request)
    env = seen["env"]
    assert (env.chain_id, env.height, env.time_ns) == (CHAIN_ID, 1, 10_000_000_005)
    assert (env.block_hash, env.proposer_address) == (b"h" * 32, b"p" * 20)
    assert [(v.validator_address, v.power, v.signed_last_block) for v in env.last_commit] == [
        (b"a" * 20, 3, True), (b"b" * 20, 4, False)]
    (evidence,) = env.misbehavior
    assert (evidence.kind, evidence.validator_address, evidence.power, evidence.time_ns,
            evidence.total_voting_power) == (1, b"c" * 20, 9, 9_000_000_000, 16)


# -- CheckTx and the mempool overlay ----------------------------------------------------------------------------
def test_check_tx_new_applies_to_the_overlay_so_a_replay_is_refused():
    app, store = started()
    commit_block(app, 1, [])
    tx = send_tx(ALICE, CAROL.address, 10, 0)
    assert app.check_tx(abci.RequestCheckTx(tx=tx)).code == 0
    replay = app.check_tx(abci.RequestCheckTx(tx=tx))
    assert replay.code == errors.InvalidNonce.code and "nonce" in replay.log
    assert app.check_tx(abci.RequestCheckTx(tx=send_tx(ALICE, CAROL.address, 10, 1))).code == 0
    assert store.last_height == 1 and balance(app, ALICE)["nonce"] == 0  # the overlay is not committed state


def test_mempool_overlay_is_reset_after_commit_and_recheck_rebuilds_it():
    app, _ = started()
    commit_block(app, 1, [])
    first, second = send_tx(ALICE, CAROL.address, 10, 0), send_tx(ALICE, CAROL.address, 10, 1)
    for tx in (first, second):
        assert app.check_tx(abci.RequestCheckTx(tx=tx)).code == 0
    commit_block(app, 2, [first])
    recheck = abci.RECHECK
    assert app.check_tx(abci.RequestCheckTx(tx=second, type=recheck)).code == 0
    assert app.check_tx(abci.RequestCheckTx(tx=first, type=recheck)).code == errors.InvalidNonce.code


def test_check_tx_answers_success_with_default_fields_and_failure_with_code_log_and_no_events():
    app, _ = started()
    commit_block(app, 1, [])
    admitted = app.check_tx(abci.RequestCheckTx(tx=send_tx(ALICE, CAROL.address, 10, 0)))
    refused = app.check_tx(abci.RequestCheckTx(tx=send_tx(ALICE, CAROL.address, 10, 7)))
    assert admitted.SerializeToString() == b""
    assert (refused.code, refused.codespace) == (errors.InvalidNonce.code, errors.InvalidNonce.codespace)
    assert "nonce" in refused.log and len(refused.events) == 0


def test_check_tx_env_is_kept_until_a_commit_moves_the_height_and_time():
    app, _ = started()
    commit_block(app, 1, [])
    first = app._next_env()
    assert app._next_env() is first and first.height == 2
    finalize(app, 2, [], time_s=1_700_000_009)
    app.commit(abci.RequestCommit())
    second = app._next_env()
    assert (second.height, second.time_ns) == (3, 1_700_000_009 * 10**9) and app._next_env() is second


def test_check_tx_before_block_one_sees_the_pending_genesis():
    app, _ = started()
    assert app.check_tx(abci.RequestCheckTx(tx=send_tx(ALICE, CAROL.address, 10, 0))).code == 0


# -- bad input: a clear code and log, and state unchanged ---------------------------------------------------------
def signed_envelope(key, body: tx_pb2.TxBody) -> bytes:
    body_bytes = body.SerializeToString()
    return tx_pb2.Tx(body_bytes=body_bytes, pubkey=key.pubkey,
                     signature=key.sign(sign_bytes(body_bytes))).SerializeToString()


def raw_send_body(nonce: int, amount_varint: bytes) -> tx_pb2.TxBody:
    """A MsgSend whose amount field is written by hand, so it can exceed 64 bits."""
    value = b"\x0a\x14" + CAROL.address + b"\x10" + amount_varint
    return tx_pb2.TxBody(chain_id=CHAIN_ID, nonce=nonce,
                         messages=[tx_pb2.Any(type_url="/trolly.bank.v1.MsgSend", value=value)])


def bad_txs() -> dict[str, tuple[bytes, type]]:
    good = send_tx(ALICE, CAROL.address, 10, 0)
    envelope = tx_pb2.Tx.FromString(good)
    forged = tx_pb2.Tx(body_bytes=envelope.body_bytes, pubkey=BOB.pubkey, signature=envelope.signature)
    unknown = tx_pb2.TxBody(chain_id=CHAIN_ID, nonce=0, messages=[tx_pb2.Any(type_url="/trolly.nope.v1.Msg")])
    return {
        "undecodable": (b"\xff\xff\xff", errors.TxDecodeError),
        "empty": (b"", errors.TxDecodeError),
        "bad signature": (forged.SerializeToString(), errors.InvalidSignature),
        "wrong chain id": (send_tx(ALICE, CAROL.address, 10, 0, chain_id="other-chain"), errors.WrongChainId),
        "skipped nonce": (send_tx(ALICE, CAROL.address, 10, 5), errors.InvalidNonce),
        "zero amount": (send_tx(ALICE, CAROL.address, 0, 0), errors.InvalidAmount),
        "unknown message": (signed_envelope(ALICE, unknown), errors.UnknownMessage),
        "unfunded sender": (send_tx(CAROL, ALICE.address, 10, 0), errors.InsufficientFunds),
        # 2**70 - 1 written as an 11-byte varint: no 64-bit field can hold it, protobuf refuses to parse it.
        "amount beyond 64 bits": (signed_envelope(ALICE, raw_send_body(0, b"\xff" * 10 + b"\x01")),
                                  errors.TxDecodeError),
    }


@pytest.mark.parametrize("case", sorted(bad_txs()))
def test_bad_tx_gets_a_clear_code_in_check_tx_and_leaves_state_unchanged(case):
    app, store = started()
    commit_block(app, 1, [])
    raw, error = bad_txs()[case]
    expected = {e.code for e in (error if isinstance(error, tuple) else (error,))}
    before = dict(store.items)
    response = app.check_tx(abci.RequestCheckTx(tx=raw))
    assert response.code in expected and response.codespace == "trolly" and response.log
    # The mempool overlay is unchanged too: the honest tx with nonce 0 is still admissible.
    assert app.check_tx(abci.RequestCheckTx(tx=send_tx(ALICE, CAROL.address, 10, 0))).code == 0
    assert store.items == before


@pytest.mark.parametrize("case", sorted(set(bad_txs()) - {"unfunded sender"}))
def test_bad_tx_in_a_block_changes_nothing(case):
    app, store = started()
    empty = commit_block(app, 1, [])
    raw, error = bad_txs()[case]
    expected = {e.code for e in (error if isinstance(error, tuple) else (error,))}
    response = finalize(app, 2, [raw])
    assert response.tx_results[0].code in expected and response.tx_results[0].log
    assert response.app_hash == empty.app_hash  # nothing changed: not even a nonce or fee


def test_amount_varint_overflowing_64_bits_in_ten_bytes_is_refused():
    app, _ = started()
    commit_block(app, 1, [])
    raw = signed_envelope(ALICE, raw_send_body(0, b"\xff" * 9 + b"\x7f"))  # 2**70 - 1 in a 10-byte varint
    code = app.check_tx(abci.RequestCheckTx(tx=raw)).code
    assert code in (errors.TxDecodeError.code, errors.InvalidAmount.code)


def test_insufficient_funds_in_a_message_charges_only_the_nonce():
    app, _ = started({ALICE: 100})
    commit_block(app, 1, [])
    response = commit_block(app, 2, [send_tx(ALICE, CAROL.address, 101, 0)])
    assert response.tx_results[0].code == errors.InsufficientFunds.code
    assert balance(app, ALICE) == {"address": encode_address(ALICE.address), "balance": 100, "nonce": 1,
                                   "pub_key": base64.b64encode(ALICE.pubkey).decode()}


# -- Query -------------------------------------------------------------------------------------------------------
def test_query_returns_canonical_json_and_a_proof_of_the_raw_value():
    app, store = started()
    commit_block(app, 1, [])
    path = f"/account/{encode_address(ALICE.address)}"
    response = app.query(abci.RequestQuery(path=path, prove=True))
    assert response.code == 0 and response.height == 1
    assert response.value == json.dumps({"address": encode_address(ALICE.address), "balance": START, "nonce": 0,
                                         "pub_key": None}, sort_keys=True, separators=(",", ":")).encode()
    (op,) = response.proof_ops.ops
    assert (op.type, op.key, response.key) == (EXIST_OP_TYPE, account_key(ALICE.address), account_key(ALICE.address))
    assert op.data == store.prove(account_key(ALICE.address)).proof
    assert store.items[op.key] == encode_account(Account(START, 0))


@pytest.mark.parametrize("path, error", [("/no/such/path", errors.UnknownQueryPath),
                                         ("/account/trolly1bad", errors.InvalidAddress),
                                         ("/params/nosuchsection", errors.InvalidRequest)])
def test_bad_queries_get_codes(path, error):
    app, store = started()
    commit_block(app, 1, [])
    before = dict(store.items)
    response = app.query(abci.RequestQuery(path=path))
    assert (response.code, response.codespace) == (error.code, "trolly") and response.log and not response.value
    assert response.height == 1 and store.items == before


def test_query_at_a_past_height_the_store_does_not_keep_is_refused_naming_the_oldest_kept():
    app, _ = started()
    commit_block(app, 1, [])
    commit_block(app, 2, [])
    assert app.query(abci.RequestQuery(path="/params", height=2)).code == 0
    refused = app.query(abci.RequestQuery(path="/params", height=1))
    assert refused.code == errors.InvalidRequest.code and "oldest height kept is 2" in refused.log


# -- proposals, vote extensions, snapshots ----------------------------------------------------------------------
def test_prepare_proposal_keeps_valid_txs_in_order_within_max_tx_bytes():
    app, _ = started()
    commit_block(app, 1, [])
    txs = [send_tx(ALICE, CAROL.address, 1, n) for n in range(4)]
    bad = send_tx(ALICE, CAROL.address, 1, 9)  # skipped nonce: would fail the ante checks
    request_txs = [txs[0], bad, txs[1], b"junk", txs[2], txs[3]]
    budget = sum(len(t) for t in txs[:3])
    kept = app.prepare_proposal(abci.RequestPrepareProposal(max_tx_bytes=budget, txs=request_txs, height=2)).txs
    assert list(kept) == txs[:3]
    everything = app.prepare_proposal(abci.RequestPrepareProposal(max_tx_bytes=10**6, txs=request_txs, height=2))
    assert list(everything.txs) == txs


def test_process_proposal_rejects_stateless_failures_only():
    app, _ = started()
    commit_block(app, 1, [])
    accept, reject = abci.ResponseProcessProposal.ACCEPT, abci.ResponseProcessProposal.REJECT
    stateful_failure = send_tx(CAROL, ALICE.address, 5, 0)  # unfunded: recorded as a failed tx, not a bad block
    assert app.process_proposal(abci.RequestProcessProposal(txs=[stateful_failure], height=2)).status == accept
    for case in ("undecodable", "bad signature", "wrong chain id", "unknown message", "zero amount"):
        raw = bad_txs()[case][0]
        assert app.process_proposal(abci.RequestProcessProposal(txs=[raw], height=2)).status == reject, case


def test_vote_extensions_are_the_seed_extension_and_only_it_or_none_verify():
    """The sampling seed's extensions (tests/abci_app/test_abci_seed.py covers the seed itself)."""
    from trolly.abci_app.seed import extension_for

    app, _ = started()
    assert app.extend_vote(abci.RequestExtendVote(height=1)).vote_extension == extension_for(1)
    verify = app.verify_vote_extension
    assert verify(abci.RequestVerifyVoteExtension()).status == abci.ResponseVerifyVoteExtension.ACCEPT
    assert verify(abci.RequestVerifyVoteExtension(vote_extension=b"x")).status == \
        abci.ResponseVerifyVoteExtension.REJECT


def test_snapshot_methods_say_no_snapshots():
    app, _ = started()
    assert list(app.list_snapshots(abci.RequestListSnapshots()).snapshots) == []
    assert app.offer_snapshot(abci.RequestOfferSnapshot()).result == abci.ResponseOfferSnapshot.REJECT
    assert app.load_snapshot_chunk(abci.RequestLoadSnapshotChunk()).chunk == b""
    assert app.apply_snapshot_chunk(abci.RequestApplySnapshotChunk()).result == \
        abci.ResponseApplySnapshotChunk.ABORT
    assert app.echo(abci.RequestEcho(message="ping")).message == "ping"


# -- codes -------------------------------------------------------------------------------------------------------
def test_every_chain_error_has_a_unique_nonzero_code_in_its_codespace():
    codes = registered_codes()
    assert all(code != 0 for _, code in codes)
    assert codes[("trolly", errors.InvalidNonce.code)] is errors.InvalidNonce


def test_error_code_maps_a_chain_error_and_refuses_anything_else():
    mapped = error_code(errors.InsufficientFunds("balance 1utrl is less than 2utrl"))
    assert (mapped.code, mapped.codespace, mapped.log) == (6, "trolly", "balance 1utrl is less than 2utrl")
    with pytest.raises(TypeError):
        error_code(ValueError("a bug"))


# -- property-based: tx decoding through the adapter --------------------------------------------------------------
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY_SETTINGS
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_check_tx_and_never_pass(raw):
    app, store = started()
    commit_block(app, 1, [])
    response = app.check_tx(abci.RequestCheckTx(tx=raw))
    assert response.code != 0 and response.log and response.codespace == "trolly"
    assert app.check_tx(abci.RequestCheckTx(tx=send_tx(ALICE, CAROL.address, 1, 0))).code == 0


@PROPERTY_SETTINGS
@given(st.data())
def test_any_single_byte_change_to_a_signed_tx_is_refused(data):
    app, _ = started()
    empty = commit_block(app, 1, [])
    good = bytearray(send_tx(ALICE, CAROL.address, 1234, 0))
    position = data.draw(st.integers(min_value=0, max_value=len(good) - 1))
    good[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    mutated = bytes(good)
    assert app.check_tx(abci.RequestCheckTx(tx=mutated)).code != 0
    assert app.process_proposal(abci.RequestProcessProposal(txs=[mutated], height=2)).status == \
        abci.ResponseProcessProposal.REJECT
    block = finalize(app, 2, [mutated])
    assert block.tx_results[0].code != 0 and block.app_hash == empty.app_hash
