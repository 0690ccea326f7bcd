"""Three app processes with different PYTHONHASHSEEDs, fed the same 520 blocks of random signed transactions
over the ABCI socket by the independent client, agree on every app hash and every tx result."""

from __future__ import annotations

import base64
import hashlib
import random

import pytest
from abci_helpers import CHAIN_ID, ServerProcess, key_for, send_tx
from chain_helpers import ONE_BLOCK_WINDOWS

import abci_wire_client as wire
from trolly.chain.crypto import encode_address
from trolly.chain.proto.staking_pb2 import MsgBond, MsgCreateValidator, MsgUnbond
from trolly.chain.tx import build_tx

pytestmark = pytest.mark.slow

BLOCKS = 520
ACCOUNTS = [key_for(i) for i in range(24)]
OPERATORS = ACCOUNTS[:3]
CONSENSUS_KEYS = {op.address: key_for(1000 + i) for i, op in enumerate(ACCOUNTS)}
BALANCE = 10**12
STAKE = 20_000_000
T0 = 1_700_000_000
ABSENT, COMMIT = 1, 2


def consensus_address(pubkey: bytes) -> bytes:
    return hashlib.sha256(pubkey).digest()[:20]


def genesis() -> bytes:
    import json

    return json.dumps({
        "params": {"auth": {"min_fee": 0, "fee_per_byte": 0}, "staking": {"unbonding_blocks": 7},
                   "market": ONE_BLOCK_WINDOWS},
        "accounts": [{"address": encode_address(k.address), "balance": str(BALANCE)} for k in ACCOUNTS],
        "validators": [{"operator": encode_address(op.address),
                        "pub_key": base64.b64encode(CONSENSUS_KEYS[op.address].pubkey).decode(),
                        "stake": str(STAKE), "moniker": f"validator-{i}"} for i, op in enumerate(OPERATORS)],
    }).encode()


def random_tx(rng: random.Random, nonces: dict[bytes, int]) -> bytes:
    """Mostly valid sends with fees; some failing on purpose (funds, amounts, nonces, garbage); staking."""
    sender = rng.choice(ACCOUNTS)
    nonce = nonces[sender.address]
    recipient = rng.choice(ACCOUNTS + [key_for(500 + rng.randrange(50))]).address
    roll = rng.random()
    if roll < 0.03:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))  # garbage
    if roll < 0.06:
        nonce += rng.choice([1, 2, -1]) if nonce else 1  # skipped or replayed
    fee = rng.choice([0, 0, 1, 7, 100])
    if roll < 0.10:
        return send_tx(sender, recipient, rng.choice([0, BALANCE * 5]), nonce, fee=fee)  # zero / unaffordable
    if roll < 0.16:
        messages = [rng.choice([MsgBond(amount=rng.randrange(1, 3_000_000)),
                                MsgUnbond(amount=rng.randrange(1, 4_000_000))])]
        return build_tx(sender, CHAIN_ID, nonce, fee, messages)
    if roll < 0.18:
        message = MsgCreateValidator(consensus_pubkey=CONSENSUS_KEYS[sender.address].pubkey,
                                     stake=rng.randrange(1_000_000, 30_000_000), moniker=f"v{rng.randrange(99)}")
        return build_tx(sender, CHAIN_ID, nonce, fee, [message])
    return send_tx(sender, recipient, rng.randrange(1, 5_000_000), nonce, fee=fee)


def test_three_processes_with_different_hash_seeds_agree_on_every_app_hash(tmp_path):
    servers = [ServerProcess(str(tmp_path / f"db{i}"), f"unix://{tmp_path / f's{i}.sock'}", hash_seed=str(seed))
               for i, seed in enumerate((0, 1, 4242))]
    try:
        clients = [wire.CometLikeClient(server.address) for server in servers]
        genesis_hashes = {c.init_chain(CHAIN_ID, genesis(), seconds=T0).bytes(3) for c in clients}
        assert len(genesis_hashes) == 1

        rng = random.Random(20261122)
        nonces = {k.address: 0 for k in ACCOUNTS}
        powers = {consensus_address(CONSENSUS_KEYS[op.address].pubkey): STAKE // 1_000_000 for op in OPERATORS}
        hashes, failures, successes, power_changes = [], 0, 0, 0
        codes: dict[int, int] = {}
        for height in range(1, BLOCKS + 1):
            txs = [random_tx(rng, nonces) for _ in range(rng.randrange(0, 9))]
            votes = [(address, power, ABSENT if rng.random() < 0.05 else COMMIT)
                     for address, power in sorted(powers.items()) if power > 0]
            misbehavior = []
            if height == 300 and votes:  # one duplicate-vote slash, same evidence to everyone
                address, power, _ = votes[-1]
                misbehavior = [(1, address, power, height - 1)]
            proposer = votes[0][0] if votes else b"\x01" * 20
            results = [c.finalize_and_commit(height, txs, seconds=T0 + height, proposer=proposer, votes=votes,
                                             misbehavior=misbehavior) for c in clients]
            app_hashes = {app_hash for app_hash, _ in results}
            assert len(app_hashes) == 1, f"app hashes diverge at height {height}"
            outcome_sets = {tuple((o.code, o.log, repr(o.events)) for o in outcomes) for _, outcomes in results}
            assert len(outcome_sets) == 1, f"tx results diverge at height {height}"
            updates = {tuple(c.last_validator_updates) for c in clients}
            assert len(updates) == 1, f"validator updates diverge at height {height}"
            for pubkey, power in clients[0].last_validator_updates:
                powers[consensus_address(pubkey)] = power
                power_changes += 1
            _, outcomes = results[0]
            for tx, outcome in zip(txs, outcomes):
                codes[outcome.code] = codes.get(outcome.code, 0) + 1
                failures += outcome.code != 0
                successes += outcome.code == 0
                charged = [attrs for kind, attrs in outcome.events if kind == "tx"]
                if charged:  # the ante passed: the signer's nonce moved on
                    signer = dict((k, v) for k, v, _ in charged[0])["signer"]
                    for account in ACCOUNTS:
                        if encode_address(account.address) == signer:
                            nonces[account.address] += 1
            hashes.append(app_hashes.pop())
        assert len(set(hashes)) > BLOCKS // 2  # the chain really moved
        assert successes > 1000 and failures > 100, (successes, failures)
        assert len(codes) >= 5, codes  # several distinct failure kinds went through
        assert power_changes >= 10, power_changes  # bonding, unbonding and the slash moved validator power
        print(f"codes {sorted(codes.items())}, validator power changes {power_changes}")
        infos = {(c.info().int(4), c.info().bytes(5)) for c in clients}
        assert infos == {(BLOCKS, hashes[-1])}
        for client in clients:
            client.close()
    finally:
        for server in servers:
            assert server.stop() == 0, server.stderr()
