"""The sampling seed from vote extensions: what each validator extends, the signed bytes, the seed
transaction a proposer builds from more than two thirds of the power, and how ProcessProposal and
FinalizeBlock check it (abci_app/seed.py)."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.timestamp_pb2 import Timestamp

from abci_helpers import CHAIN_ID, FakeStore, key_for, send_tx
from trolly.abci_app import seed
from trolly.abci_app.framing import encode_uvarint
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.proto.tendermint.types import validator_pb2
from trolly.chain.crypto import encode_address
from trolly.chain.validators import consensus_address_of

OPERATORS = [key_for(10 + i) for i in range(4)]
CONSENSUS = [key_for(20 + i) for i in range(4)]
POWERS = [40, 30, 20, 10]
HEIGHT = 5  # the block being proposed; the extensions are those of height 4


def canonical_vote_extension_class():
    """CometBFT's CanonicalVoteExtension, declared here with the protobuf library (an independent encoder)."""
    file = descriptor_pb2.FileDescriptorProto(name="canonical_test.proto", package="check", syntax="proto3")
    message = file.message_type.add(name="CanonicalVoteExtension")
    for number, (name, kind) in enumerate([("extension", 12), ("height", 16), ("round", 16), ("chain_id", 9)], 1):
        message.field.add(name=name, number=number, type=kind, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("check.CanonicalVoteExtension"))


@pytest.mark.parametrize("height,round_,chain_id", [(4, 0, "trolly-1"), (1, 3, "c"), (2**40, 0, ""), (7, 200, "x" * 300)])
def test_the_signed_bytes_are_the_length_delimited_canonical_vote_extension(height, round_, chain_id):
    Canonical = canonical_vote_extension_class()
    extension = seed.extension_for(height)
    body = Canonical(extension=extension, height=height, round=round_, chain_id=chain_id).SerializeToString()
    assert seed.extension_sign_bytes(chain_id, height, round_, extension) == encode_uvarint(len(body)) + body


def started() -> TrollyApplication:
    app_state = {
        "params": {"auth": {"min_fee": 0, "fee_per_byte": 0}},
        "accounts": [{"address": encode_address(k.address), "balance": str(10**9)} for k in OPERATORS],
        "validators": [{"operator": encode_address(op.address), "pub_key": base64.b64encode(cons.pubkey).decode(),
                        "stake": str(power * 10**6), "moniker": f"v{i}"}
                       for i, (op, cons, power) in enumerate(zip(OPERATORS, CONSENSUS, POWERS))],
    }
    app = TrollyApplication(FakeStore())
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1, app_state_bytes=json.dumps(app_state).encode()))
    for height in range(1, HEIGHT):
        app.finalize_block(abci.RequestFinalizeBlock(height=height, time=Timestamp(seconds=1_700_000_000 + height)))
        app.commit(abci.RequestCommit())
    return app


def extended_commit(signers, round_=0, forge=()) -> abci.ExtendedCommitInfo:
    votes = []
    for i, (cons, power) in enumerate(zip(CONSENSUS, POWERS)):
        extension = seed.extension_for(HEIGHT - 1)
        signed = i in signers
        signature = cons.sign(seed.extension_sign_bytes(CHAIN_ID, HEIGHT - 1, round_, extension)) if signed else b""
        if i in forge:
            signature = CONSENSUS[(i + 1) % 4].sign(seed.extension_sign_bytes(CHAIN_ID, HEIGHT - 1, round_, extension))
        votes.append(abci.ExtendedVoteInfo(
            validator=abci.Validator(address=consensus_address_of(cons.pubkey), power=power),
            vote_extension=extension if signed else b"", extension_signature=signature,
            block_id_flag=validator_pb2.BLOCK_ID_FLAG_COMMIT if signed else validator_pb2.BLOCK_ID_FLAG_ABSENT))
    return abci.ExtendedCommitInfo(round=round_, votes=votes)


def last_commit(extended: abci.ExtendedCommitInfo) -> abci.CommitInfo:
    return abci.CommitInfo(round=extended.round, votes=[abci.VoteInfo(validator=v.validator, block_id_flag=v.block_id_flag)
                                                        for v in extended.votes])


def propose(app, extended) -> list[bytes]:
    return list(app.prepare_proposal(abci.RequestPrepareProposal(height=HEIGHT, max_tx_bytes=10**6,
                                                                   local_last_commit=extended)).txs)


def process(app, txs, extended) -> int:
    return app.process_proposal(abci.RequestProcessProposal(height=HEIGHT, txs=txs,
                                                            proposed_last_commit=last_commit(extended))).status


def test_every_validator_extends_its_vote_with_the_same_bytes_and_only_those_or_none_verify():
    app = started()
    assert app.extend_vote(abci.RequestExtendVote(height=9)).vote_extension == seed.extension_for(9)
    verify = app.verify_vote_extension
    accept, reject = abci.ResponseVerifyVoteExtension.ACCEPT, abci.ResponseVerifyVoteExtension.REJECT
    assert verify(abci.RequestVerifyVoteExtension(height=9, vote_extension=seed.extension_for(9))).status == accept
    assert verify(abci.RequestVerifyVoteExtension(height=9)).status == accept
    assert verify(abci.RequestVerifyVoteExtension(height=9, vote_extension=seed.extension_for(8))).status == reject


def test_a_proposal_leads_with_a_seed_tx_that_proposal_checks_accept_and_finalize_samples_from():
    app = started()
    extended = extended_commit(signers={0, 1, 2})  # 90 of 100
    txs = propose(app, extended)
    assert len(txs) == 1 and seed.is_seed_tx(txs[0])
    assert process(app, txs, extended) == abci.ResponseProcessProposal.ACCEPT
    proven = seed.verify_seed_tx(app._execution_base(), CHAIN_ID, HEIGHT, txs[0], last_commit(extended))
    response = app.finalize_block(abci.RequestFinalizeBlock(height=HEIGHT, txs=txs, hash=b"h" * 32,
                                                            decided_last_commit=last_commit(extended),
                                                            time=Timestamp(seconds=1_700_000_100)))
    assert len(response.tx_results) == 1 and response.tx_results[0].code == 0
    assert len(proven) == 32


def test_another_qualifying_subset_gives_another_seed_which_is_the_bias_left():
    app = started()
    seeds = set()
    for signers in ({0, 1, 2, 3}, {0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {0, 1}):
        extended = extended_commit(signers)
        txs = propose(app, extended)
        seeds.add(seed.verify_seed_tx(app._execution_base(), CHAIN_ID, HEIGHT, txs[0], last_commit(extended)))
    assert len(seeds) == 5  # 40/30/20/10: five subsets hold more than two thirds


def test_no_seed_tx_without_more_than_two_thirds_of_verified_extensions():
    app = started()
    assert propose(app, extended_commit(signers={0, 2})) == []  # 60 of 100
    assert propose(app, extended_commit(signers={0, 1, 2}, forge={1})) == []  # 30 signed by another key: 60
    assert propose(app, abci.ExtendedCommitInfo()) == []  # the solo engine: no extensions, the block hash seeds


def test_process_proposal_rejects_a_seed_tx_that_proves_too_little_or_is_forged():
    app = started()
    extended = extended_commit(signers={0, 1, 2})
    good = propose(app, extended)[0]
    proof = seed.SeedProof.decode(good)
    too_little = seed.SeedProof(proof.height, proof.round, proof.signatures[:1]).encode()
    forged = seed.SeedProof(proof.height, proof.round,
                            tuple((a, bytes(64)) if i == 0 else (a, s) for i, (a, s) in enumerate(proof.signatures))).encode()
    other_height = seed.SeedProof(proof.height - 1, proof.round, proof.signatures).encode()
    unordered = seed.SeedProof(proof.height, proof.round, tuple(reversed(proof.signatures))).encode()
    for bad in (too_little, forged, other_height, unordered, good[:-1]):
        assert process(app, [bad], extended) == abci.ResponseProcessProposal.REJECT
    assert process(app, [good], extended) == abci.ResponseProcessProposal.ACCEPT


def test_a_seed_tx_only_counts_first():
    app = started()
    extended = extended_commit(signers={0, 1, 2})
    good = propose(app, extended)[0]
    transfer = send_tx(OPERATORS[0], OPERATORS[1].address, 1, nonce=0)
    assert process(app, [transfer], extended) == abci.ResponseProcessProposal.ACCEPT
    assert process(app, [good, transfer], extended) == abci.ResponseProcessProposal.ACCEPT
    assert process(app, [transfer, good], extended) == abci.ResponseProcessProposal.REJECT
