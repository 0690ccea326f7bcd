"""The vote record: one vote per segment, ever, across restarts."""

from __future__ import annotations

import pytest

from trolly.verifier.errors import VoteRecordError
from trolly.verifier.votes import BROADCAST, INCLUDED, RESERVED, VoteRecord

KEY = (1, 0, "trolly1worker", 3)


def test_a_segment_can_be_reserved_only_once_even_after_reopening(tmp_path):
    record = VoteRecord(tmp_path / "votes.sqlite")
    assert record.reserve(KEY, 1, "pass", "fine", "ab" * 32, b"signed")
    assert not record.reserve(KEY, 2, "fail", "changed my mind", "cd" * 32, b"other")
    record.close()
    reopened = VoteRecord(tmp_path / "votes.sqlite")
    assert not reopened.reserve(KEY, 2, "fail", "after restart", "cd" * 32, b"other")
    row = reopened.get(KEY)
    assert (row.verdict, row.signed_tx, row.status) == (1, b"signed", RESERVED)
    assert reopened.voted_keys() == {KEY}


def test_status_moves_from_reserved_to_broadcast_to_included(tmp_path):
    record = VoteRecord(tmp_path / "votes.sqlite")
    record.reserve(KEY, 2, "fail", "bf16", "ab" * 32, b"tx")
    assert [r.key for r in record.unfinished()] == [KEY]
    record.mark(KEY, BROADCAST, tx_hash="AB12")
    assert record.get(KEY).tx_hash == "AB12" and record.unfinished()[0].status == BROADCAST
    record.mark(KEY, INCLUDED, height=7)
    assert record.get(KEY).tx_hash == "AB12" and record.get(KEY).height == 7
    assert record.unfinished() == [] and record.counts() == {"fail": 1, INCLUDED: 1}


def test_release_only_drops_votes_that_never_landed(tmp_path):
    record = VoteRecord(tmp_path / "votes.sqlite")
    record.reserve(KEY, 1, "pass", "fine", "ab" * 32, b"tx")
    record.release(KEY)
    assert record.get(KEY) is None
    record.reserve(KEY, 1, "pass", "fine", "ab" * 32, b"tx")
    record.mark(KEY, INCLUDED, height=3)
    record.release(KEY)
    assert record.get(KEY) is not None


def test_fetch_attempts_are_counted_across_restarts(tmp_path):
    record = VoteRecord(tmp_path / "votes.sqlite")
    assert record.add_attempt(KEY, "refused") == 1
    assert record.add_attempt(KEY, "refused again") == 2
    record.close()
    assert VoteRecord(tmp_path / "votes.sqlite").attempts(KEY) == 2


def test_an_unusable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(VoteRecordError):
        VoteRecord(blocker / "votes.sqlite")
