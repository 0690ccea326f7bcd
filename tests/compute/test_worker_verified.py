"""Worker and verifier together, in process: an honest worker and a `--cheat skipped_steps` worker train a task on
the in-process chain, serve their checkpoints from real blob services on 127.0.0.1, and the verifier's own
`verify_segment` replays every sampled segment from what they serve. The honest worker's segments pass and it
is paid; the cheater's fail, it is slashed and told to finish; the task completes with weights built from the
honest updates alone."""

from __future__ import annotations

import pytest
from worker_helpers import ROUNDS, honest_and_cheating_task

from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.compute.worker import plan
from trolly.wallet.market_views import TaskView

pytest.importorskip("trolly.verifier.segment_check", reason="the verifier package (trolly.verifier.segment_check)")


def test_the_verifier_passes_the_honest_worker_and_catches_skipped_steps(make_chain, tmp_path):
    judged = honest_and_cheating_task(make_chain, tmp_path, "skipped_steps")
    verdicts = {worker: [r.verdict for r in reports] for worker, reports in judged.reports.items()}
    honest, cheater = judged.honest, judged.cheater
    assert set(verdicts[honest]) == {VERDICT_PASS} and len(verdicts[honest]) == 2 * ROUNDS + 1
    assert verdicts[cheater] and VERDICT_FAIL in verdicts[cheater]
    view = judged.settled()
    assert judged.services[1].state.task(judged.task_id).outcome.startswith("slashed")
    assert plan.decide(TaskView.from_answer(view), cheater).kind == plan.FINISH
