"""A worker that publishes what its checkpoints do not give (issue 19 items 1 and 2), end to end in process.

An honest worker and a cheating one (`--cheat forged_update`: honest segments, altered update; or
`--cheat garbage_blobs`: hash-consistent hostile checkpoints and update, with forged shapes of 2^31 elements,
zero dimensions and truncations) train a task on the in-process chain and serve their blobs from real blob
services on 127.0.0.1; the verifier's `verify_segment` judges every sampled segment from what they serve.
The honest worker and the verifier carry on through every round, the cheater is slashed on its first round,
and the task completes with weights built from the honest updates alone.
"""

from __future__ import annotations

import pytest
from worker_helpers import ROUNDS, honest_and_cheating_task

from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS


@pytest.mark.parametrize("cheat, reason", [("forged_update", "forged update"), ("garbage_blobs", "does not decode")])
def test_a_worker_publishing_what_its_checkpoints_do_not_give_is_slashed_and_nobody_crashes(make_chain, tmp_path,
                                                                                          cheat, reason):
    judged = honest_and_cheating_task(make_chain, tmp_path, cheat)
    reports, honest, cheater = judged.reports, judged.honest, judged.cheater
    assert {r.verdict for r in reports[honest]} == {VERDICT_PASS} and len(reports[honest]) == 2 * ROUNDS + 1
    assert {r.verdict for r in reports[cheater]} == {VERDICT_FAIL}
    assert all(reason in r.reason for r in reports[cheater]), [r.reason for r in reports[cheater]]
    judged.settled()
