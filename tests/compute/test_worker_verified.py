"""Worker and verifier together, in process: an honest worker and a `--cheat skipped_steps` worker train a task on
the in-process chain, serve their checkpoints from real blob services on 127.0.0.1, and the verifier's own
`verify_segment` replays every sampled segment from what they serve. The honest worker's segments pass and it
is paid; the cheater's fail, it is slashed and told to finish; the task completes with weights built from the
honest updates alone."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from market_helpers import MARKET_PARAMS, Market
from worker_helpers import ROUNDS, STEPS, judge_as_a_validator, new_service, spec_document

from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.blobs import AddressPolicy
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.compute.weights_follower import WeightsFollower
from trolly.compute.worker import plan
from trolly.wallet.market_views import SampledSegment, TaskView

replay = pytest.importorskip("trolly.verifier.segment_check",
                             reason="the verifier package (trolly.verifier.segment_check)")
evidence = pytest.importorskip("trolly.verifier.evidence", reason="the verifier package (trolly.verifier.evidence)")


def test_the_verifier_passes_the_honest_worker_and_catches_skipped_steps(make_chain, tmp_path):
    blobs = build_dataset("digits")
    dataset = dataset_from_blobs(blobs)
    spec_bytes = spec_document(blobs.manifest_hash)
    spec = parse_spec(spec_bytes)
    chain = make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    keys = market.workers[:2]
    services = [new_service(tmp_path / "honest", chain, keys[0]), new_service(tmp_path / "cheat", chain, keys[1],
                                                                              cheat="skipped_steps")]
    replayer = replay.Replayer()
    weights = WeightsFollower(spec, dataset.shape, AddressPolicy(allow_private=True))  # the validator's own W_r
    verdicts: dict[str, list[int]] = {}

    async def verify_pending(task_id: int) -> None:
        txs = []
        for item in market.to_verify(chain.operators[0]):
            claim = replay.SegmentClaim.from_segment(SampledSegment.from_answer(item))
            report = await judge_as_a_validator(item, spec, dataset, replayer, market, task_id, weights)
            verdicts.setdefault(claim.worker, []).append(report.verdict)
            digest = evidence.replay_digest(report)
            txs.append(chain.tx(chain.operators[0], pb.MsgSubmitVerdict(
                task_id=task_id, round=claim.round, worker=claim.worker_bytes, segment=claim.segment,
                verdict=report.verdict, evidence_hash=report.evidence_hash(),
                replay_commitment=evidence.commitment(chain.operators[0].address, b"s" * 32, digest))))
        chain.block(*txs)

    async def scenario() -> int:
        for service in services:
            await service.server.start()
        output = chain.block(*[chain.tx(key, pb.MsgRegisterWorker(
            stake=2_000_000, blob_url=service.server.url,
            hardware=pb.HardwareProfile(device="cpu", samples_per_second=100, threads=1)))
            for key, service in zip(keys, services)])
        assert all(r.ok for r in output.tx_results)
        task_id = market.submit(spec=spec_bytes, spec_hash=hashlib.sha256(spec_bytes).digest(), workers=2,
                                rounds=ROUNDS, samples_per_worker=2, round_blocks=20)
        market.join(task_id, keys)
        contexts = []
        for index, service in enumerate(services):
            service.state.add_task(task_id, hashlib.sha256(spec_bytes).hexdigest(), index)
            contexts.append(await service.prepare(service.state.task(task_id)))
        alive = [True, True]
        try:
            for _ in range(100):
                for index in (0, 1):
                    if alive[index] and not await services[index].step(contexts[index]):
                        alive[index] = False
                if not alive[0]:
                    return task_id
                phase = market.task(task_id)["phase"]
                if phase == "sampling":
                    chain.advance(1)
                elif phase == "verify":
                    await verify_pending(task_id)
        finally:
            for service in services:
                await service.server.stop()
        raise AssertionError("the task did not finish")

    task_id = asyncio.run(scenario())
    honest, cheater = (services[0].address, services[1].address)
    assert set(verdicts[honest]) == {VERDICT_PASS} and len(verdicts[honest]) == 2 * ROUNDS + 1
    assert verdicts[cheater] and VERDICT_FAIL in verdicts[cheater]
    view = market.task(task_id)
    assert view["status"] == "completed"
    members = {m["worker"]: m for m in view["members"]}
    assert members[cheater]["status"] == "slashed" and members[cheater]["slashed"] > 0 and members[cheater]["paid"] == 0
    assert members[honest]["rounds_passed"] == ROUNDS and members[honest]["paid"] > 0
    assert services[1].state.task(task_id).outcome.startswith("slashed")

    codec = get_codec(spec.codec)
    feedback = ErrorFeedback(codec)
    state = GlobalState.initial(initial_weights(spec, dataset.shape))
    for round_index in range(ROUNDS):  # only the honest worker's updates count
        result = run_round(Trainer(spec, dataset), state.weights, worker_index=0, round_index=round_index, steps=STEPS)
        update = WorkerUpdate(0, result.samples_processed, codec.decode(feedback.encode(result.pseudo_gradient)[0]))
        state = outer_step(state, [update], spec.training.outer_optimizer)
    assert view["final_weights_hash"] == state.weights_hash().hex()
    assert plan.decide(TaskView.from_answer(view), cheater).kind == plan.FINISH
