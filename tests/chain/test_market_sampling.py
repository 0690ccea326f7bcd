"""Sampling: the segments to verify come from a block that did not exist when the commitments were made."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings, strategies as st

from chain_helpers import Chain
from market_helpers import MARKET_PARAMS, Market, spec_bytes
from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.market.sampling import sample_segments


class SaltedChain(Chain):
    """A chain whose block hash at one height is salted: two such chains differ only in that block's hash."""

    def __init__(self, salted_height: int, salt: bytes, **options) -> None:
        self.salted_height, self.salt = salted_height, salt
        super().__init__(**options)

    def env(self, height, misbehavior=(), proposer=b""):
        env = super().env(height, misbehavior, proposer)
        if height != self.salted_height:
            return env
        return type(env)(**{**env.__dict__, "block_hash": hashlib.sha256(self.salt + env.block_hash).digest()})


def run_to_sampling(chain: Chain) -> tuple[Market, int, dict]:
    """A 3-worker task with 10 segments per worker, committed; returns what the chain knew at commit time."""
    market = Market(chain)
    task_id = market.open_task(workers=3, spec=spec_bytes(inner_steps=100, checkpoint_every=10), samples_per_worker=3,
                               collateral=10**8)
    market.commit(task_id, 0, market.workers[:3], steps=[100, 100, 100], checkpoint_every=10)
    at_commit = {"verify": market.to_verify(chain.operators[0]),
                 "segments": [c["segments"] for c in market.round_commitments(task_id, 0).values()]}
    return market, task_id, at_commit


def sampled(market: Market, task_id: int) -> dict[str, list[int]]:
    return {worker: c["segments"] for worker, c in market.round_commitments(task_id, 0).items()}


def test_segments_depend_on_the_hash_of_a_block_after_the_commitments(register_state):
    # Blocks: 1 register, 2 submit, 3 join, 4 commit (the round closes), 5 = 4 + sampling_delay samples.
    outcomes = []
    for salt in (b"a", b"b"):
        chain = SaltedChain(5, salt, accounts=4, validators=1, params={"market": MARKET_PARAMS})
        register_state(chain.state)
        market, task_id, at_commit = run_to_sampling(chain)
        assert chain.height == 4
        # At commit time nothing about the sample exists in state: it is drawn from a hash still to come.
        assert at_commit == {"verify": [], "segments": [[], [], []]}
        chain.block()
        segments = sampled(market, task_id)
        seed = chain.env(5).block_hash
        for worker, drawn in segments.items():
            assert drawn == sample_segments(seed, task_id, 0, decode_address(worker), 10, 3)
        outcomes.append(segments)
    assert outcomes[0].keys() == outcomes[1].keys()
    assert outcomes[0] != outcomes[1]  # same commitments, different later block hash: different segments


def test_segments_differ_between_workers_and_rounds():
    seed = hashlib.sha256(b"seed").digest()
    a, b = b"\x01" * 20, b"\x02" * 20
    draws = {tuple(sample_segments(seed, 1, r, w, 1000, 4)) for r in (0, 1) for w in (a, b)}
    assert len(draws) == 4


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.integers(0, 2**64 - 1), st.integers(0, 2**32),
       st.binary(min_size=20, max_size=20), st.integers(1, 300), st.integers(1, 70))
def test_sample_is_distinct_in_range_and_deterministic(seed, task_id, round_, worker, segments, samples):
    drawn = sample_segments(seed, task_id, round_, worker, segments, samples)
    assert len(drawn) == min(samples, segments) == len(set(drawn))
    assert all(0 <= s < segments for s in drawn)
    assert drawn == sample_segments(seed, task_id, round_, worker, segments, samples)


def test_sampling_is_close_to_uniform():
    counts = [0] * 7
    for i in range(7000):
        seed = hashlib.sha256(i.to_bytes(4, "big")).digest()
        counts[sample_segments(seed, 1, 0, b"\x00" * 20, 7, 1)[0]] += 1
    assert all(850 < c < 1150 for c in counts), counts


def test_verify_query_lists_each_sampled_segment_until_the_validator_votes(make_chain):
    chain = make_chain(accounts=4, validators=2, params={"market": MARKET_PARAMS})
    market, task_id, _ = run_to_sampling(chain)
    chain.block()
    first, second = chain.operators
    items = market.to_verify(first)
    assert len(items) == 9 and items == market.to_verify(second)
    commitments = market.round_commitments(task_id, 0)
    for item in items:
        commitment = commitments[item["worker"]]
        assert item["segment"] in commitment["segments"]
        assert item["checkpoint_root"] == commitment["checkpoint_root"]
        assert item["blob_url"].startswith("http://127.0.0.1:")
    market.vote([first], task_id)  # power 10 of 20: nothing decided yet
    assert market.to_verify(first) == [] and len(market.to_verify(second)) == 9
    assert encode_address(first.address) in {v["validator"] for c in market.round_commitments(task_id, 0).values()
                                             for v in c["verdicts"]}


class SeededChain(Chain):
    """A chain whose blocks carry a vote-extension sampling seed (as FinalizeBlock passes one)."""

    def env(self, height, misbehavior=(), proposer=b""):
        env = super().env(height, misbehavior, proposer)
        return type(env)(**{**env.__dict__, "sampling_seed": hashlib.sha256(b"seed" + height.to_bytes(8, "big")).digest()})


def test_a_blocks_vote_extension_seed_replaces_its_hash_as_the_sampling_seed(register_state):
    chain = SeededChain(accounts=4, validators=1, params={"market": MARKET_PARAMS})
    register_state(chain.state)
    market, task_id, _ = run_to_sampling(chain)
    chain.block()
    seed = hashlib.sha256(b"seed" + chain.height.to_bytes(8, "big")).digest()
    for worker, segments in sampled(market, task_id).items():
        expected = sample_segments(seed, task_id, 0, decode_address(worker), 10, 3)
        assert segments == expected


def test_with_seed_from_extensions_a_block_without_a_seed_defers_sampling(register_state):
    class SeedFromHeight(SeededChain):
        """Blocks carry a seed only from height 7 on."""

        def env(self, height, misbehavior=(), proposer=b""):
            env = super().env(height, misbehavior, proposer)
            return env if height >= 7 else type(env)(**{**env.__dict__, "sampling_seed": b""})

    chain = SeedFromHeight(accounts=4, validators=1, params={"market": {**MARKET_PARAMS, "seed_from_extensions": 1}})
    register_state(chain.state)
    market, task_id, _ = run_to_sampling(chain)  # committed in block 4
    outputs = [chain.block(), chain.block()]  # 5 and 6: no seed, sampling waits
    assert market.task(task_id)["phase"] == "sampling"
    assert len([e for o in outputs for e in o.events if dict(e.attributes).get("action") == "sampling_deferred"]) == 2
    chain.block()  # 7 carries a seed
    seed = hashlib.sha256(b"seed" + (7).to_bytes(8, "big")).digest()
    assert market.task(task_id)["phase"] == "verify"
    for worker, segments in sampled(market, task_id).items():
        assert segments == sample_segments(seed, task_id, 0, decode_address(worker), 10, 3)
