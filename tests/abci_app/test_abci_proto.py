"""The generated ABCI types match CometBFT v0.38 on the wire (vectors computed by hand from the .proto facts).

Each expected byte string is written out from the field numbers of CometBFT v0.38
`proto/tendermint/abci/types.proto` (tag = number << 3 | wire type), not produced by the code under test.
"""

from __future__ import annotations

import pytest

from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.proto.tendermint.crypto import keys_pb2, proof_pb2
from trolly.abci_app.proto.tendermint.types import params_pb2, validator_pb2

REQUEST_CASES = {
    "echo": 1, "flush": 2, "info": 3, "init_chain": 5, "query": 6, "check_tx": 8, "commit": 11,
    "list_snapshots": 12, "offer_snapshot": 13, "load_snapshot_chunk": 14, "apply_snapshot_chunk": 15,
    "prepare_proposal": 16, "process_proposal": 17, "extend_vote": 18, "verify_vote_extension": 19,
    "finalize_block": 20,
}
RESPONSE_CASES = {
    "exception": 1, "echo": 2, "flush": 3, "info": 4, "init_chain": 6, "query": 7, "check_tx": 9, "commit": 12,
    "list_snapshots": 13, "offer_snapshot": 14, "load_snapshot_chunk": 15, "apply_snapshot_chunk": 16,
    "prepare_proposal": 17, "process_proposal": 18, "extend_vote": 19, "verify_vote_extension": 20,
    "finalize_block": 21,
}


def oneof_numbers(message_type) -> dict[str, int]:
    return {field.name: field.number for field in message_type.DESCRIPTOR.oneofs_by_name["value"].fields}


def test_request_oneof_has_every_v038_case_at_its_number():
    assert oneof_numbers(abci.Request) == REQUEST_CASES


def test_response_oneof_has_every_v038_case_at_its_number():
    assert oneof_numbers(abci.Response) == RESPONSE_CASES


def test_removed_v034_methods_leave_their_numbers_unused():
    used = set(oneof_numbers(abci.Request).values())
    assert used.isdisjoint({4, 7, 9, 10})  # SetOption, BeginBlock, DeliverTx, EndBlock
    assert set(oneof_numbers(abci.Response).values()).isdisjoint({5, 8, 10, 11})


@pytest.mark.parametrize(
    "message, expected_hex",
    [
        # Request{echo{message:"hi"}}: field 1 LEN(4) { field 1 LEN(2) "hi" }
        (abci.Request(echo=abci.RequestEcho(message="hi")), "0a040a026869"),
        # Request{flush{}}: field 2, empty
        (abci.Request(flush=abci.RequestFlush()), "1200"),
        # Request{finalize_block{txs:["ab"], height:5}}: tag 20<<3|2 = 0xa2 0x01
        (abci.Request(finalize_block=abci.RequestFinalizeBlock(txs=[b"ab"], height=5)), "a201060a0261622805"),
        # Request{check_tx{tx:"x", type:RECHECK}}: field 8 -> 0x42
        (abci.Request(check_tx=abci.RequestCheckTx(tx=b"x", type=abci.RECHECK)), "42050a01781001"),
        # Response{finalize_block{app_hash: 01 02}}: tag 21<<3|2 = 0xaa 0x01, app_hash field 5 -> 0x2a
        (abci.Response(finalize_block=abci.ResponseFinalizeBlock(app_hash=b"\x01\x02")), "aa01042a020102"),
        # Response{commit{retain_height:7}}: field 12 -> 0x62, retain_height field 3 -> 0x18
        (abci.Response(commit=abci.ResponseCommit(retain_height=7)), "62021807"),
        # Response{exception{error:"e"}}: field 1
        (abci.Response(exception=abci.ResponseException(error="e")), "0a030a0165"),
        # ResponseInfo: data 1, version 2, app_version 3, last_block_height 4, last_block_app_hash 5
        (abci.ResponseInfo(data="t", version="v", app_version=1, last_block_height=2, last_block_app_hash=b"\xff"),
         "0a0174120176180120022a01ff"),
        # ResponseQuery: code 1, log 3, key 6, value 7, height 9 (0x48), codespace 10 (0x52)
        (abci.ResponseQuery(code=1, log="l", key=b"k", value=b"v", height=3, codespace="c"),
         "08011a016c32016b3a0176480352016" + "3"),
        # ExecTxResult: code 1, data 2, log 3, events 7 (0x3a), codespace 8 (0x42)
        (abci.ExecTxResult(code=2, events=[abci.Event(type="t", attributes=[
            abci.EventAttribute(key="k", value="v", index=True)])], codespace="s"),
         "0802" + "3a0d" + "0a0174" + "1208" + "0a016b1201761801" + "420173"),
    ],
)
def test_known_encodings(message, expected_hex):
    assert message.SerializeToString(deterministic=True).hex() == expected_hex
    assert type(message).FromString(bytes.fromhex(expected_hex)) == message


def test_validator_update_carries_an_ed25519_key_in_field_one():
    key = bytes(range(32))
    update = abci.ValidatorUpdate(pub_key=keys_pb2.PublicKey(ed25519=key), power=10)
    # pub_key (1) LEN 34 { ed25519 (1) LEN 32 key } power (2) 10
    assert update.SerializeToString().hex() == "0a22" + "0a20" + key.hex() + "100a"


def test_vote_info_uses_block_id_flag_at_three_not_signed_last_block():
    vote = abci.VoteInfo(validator=abci.Validator(address=b"\xaa", power=5),
                         block_id_flag=validator_pb2.BLOCK_ID_FLAG_COMMIT)
    # validator (1) LEN 5 { address (1) LEN 1 aa, power (3) 5 } block_id_flag (3) = 2
    assert vote.SerializeToString().hex() == "0a050a01aa18051802"
    assert validator_pb2.BLOCK_ID_FLAG_ABSENT == 1 and validator_pb2.BLOCK_ID_FLAG_NIL == 3


def test_enum_values_match_v038():
    assert (abci.NEW, abci.RECHECK) == (0, 1)
    assert abci.ResponseProcessProposal.ACCEPT == 1 and abci.ResponseProcessProposal.REJECT == 2
    assert abci.ResponseVerifyVoteExtension.ACCEPT == 1 and abci.ResponseVerifyVoteExtension.REJECT == 2
    assert abci.ResponseOfferSnapshot.REJECT == 3
    assert abci.ResponseApplySnapshotChunk.ABORT == 2
    assert (abci.DUPLICATE_VOTE, abci.LIGHT_CLIENT_ATTACK) == (1, 2)


def test_proof_ops_and_consensus_params_field_numbers():
    ops = proof_pb2.ProofOps(ops=[proof_pb2.ProofOp(type="t", key=b"k", data=b"d")])
    assert ops.SerializeToString().hex() == "0a09" + "0a0174" + "12016b" + "1a0164"
    params = params_pb2.ConsensusParams(abci=params_pb2.ABCIParams(vote_extensions_enable_height=1))
    assert params.SerializeToString().hex() == "2a020801"  # abci is field 5


def test_proto_package_is_tendermint_abci_not_v1():
    assert abci.DESCRIPTOR.package == "tendermint.abci"
    assert abci.Request.DESCRIPTOR.full_name == "tendermint.abci.Request"
