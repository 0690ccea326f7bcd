"""Records read shared within a block (`market.store.shared_record`) and records encoded with only their plain
fields checked for floats (`market.records.encode_record`): the commits block's speed-ups answer as before."""

from __future__ import annotations

import dataclasses

import pytest

from trolly.chain.block import BlockContext, BlockEnv
from trolly.chain.codec import canonical_json
from trolly.chain.market.records import Commitment, Task, decode_record, encode_record
from trolly.chain.market.store import put_task, shared_member, shared_task
from trolly.chain.market.errors import TaskNotFound
from trolly.chain.state import MemoryKV, State


def _task(**changes) -> Task:
    task = Task(id=7, requester=b"r" * 20, spec_hash=b"h" * 32, status="running", phase="commit", rounds=3,
                workers_wanted=2, reward_per_round=10, collateral=5, samples_per_worker=2, round_blocks=4, budget=99,
                escrow=99, inner_steps=20, batch_size=8, checkpoint_every=5, seed=1, created_height=2,
                join_deadline=9, terms={"committee_size": 7, "nested": {"z": 1, "a": [1, 2]}},
                members=[b"a" * 20, b"b" * 20])
    return dataclasses.replace(task, **changes)


def _context() -> BlockContext:
    return BlockContext(BlockEnv("trolly-test", 5, 5 * 10**9))


def test_a_shared_task_is_decoded_once_while_its_bytes_stay_the_same() -> None:
    state, ctx = State(MemoryKV()), _context()
    put_task(state, _task())
    first = shared_task(state, ctx, 7)
    assert shared_task(state, ctx, 7) is first
    assert first == _task()


def test_a_write_and_a_rollback_are_seen_by_the_next_shared_read() -> None:
    """A stale record would let a handler act on a task as it was before this block's writes (or on a write
    that a failed transaction rolled back)."""
    state, ctx = State(MemoryKV()), _context()
    put_task(state, _task())
    before = shared_task(state, ctx, 7)
    marker = state.snapshot()
    put_task(state, _task(round=3))
    assert shared_task(state, ctx, 7).round == 3
    state.rollback(marker)
    again = shared_task(state, ctx, 7)
    assert again.round == 0 and again == before


def test_missing_shared_records_answer_as_the_plain_reads() -> None:
    state, ctx = State(MemoryKV()), _context()
    with pytest.raises(TaskNotFound):
        shared_task(state, ctx, 9)
    assert shared_member(state, ctx, 9, b"a" * 20) is None


def test_encode_record_gives_the_canonical_json_of_the_record() -> None:
    """The stored bytes must not change: every node hashes them into the app hash."""
    commitment = Commitment(task_id=5, round=1, worker=b"w" * 20, update_hash=b"u" * 32, samples_processed=160,
                            steps=20, checkpoint_root=b"c" * 32, num_checkpoints=5, start_weights_hash=b"s" * 32,
                            determinism_profile='torch-"é"\\/x', height=7, residual_hash=b"r" * 32)
    for record in (commitment, _task()):
        expected = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        expected = {k: v.hex() if isinstance(v, bytes) else [i.hex() for i in v]
                    if isinstance(v, list) and v and isinstance(v[0], bytes) else v for k, v in expected.items()}
        assert encode_record(record) == canonical_json(expected)
        assert decode_record(type(record), encode_record(record)) == record


@pytest.mark.parametrize("changes", [{"round": 1.0}, {"terms": {"committee_size": 7.5}},
                                     {"terms": {"nested": [{"x": 0.1}]}}])
def test_a_float_anywhere_in_a_plain_field_is_still_refused(changes: dict) -> None:
    """Hex fields skip the float walk; a float in any other field (nested too) must still be refused."""
    with pytest.raises(TypeError, match="floats"):
        encode_record(_task(**changes))
