"""The worker loop (`WorkerService.step`) against the real market state machine, in process.

`ChainMarket` (a test fake) gives the service the `MarketClient` calls it makes, answered by a
`chain_helpers.Chain`: queries read its committed state and every broadcast is one block. The test decides
when blocks pass and how validators vote, and can "kill" the worker at the worst moments (after signing,
before broadcasting; after inclusion, before saving) by raising an exception the service cannot catch, then
start a fresh service on the same home, as a restarted process would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest
from market_helpers import MARKET_PARAMS, Market
from worker_helpers import (ROUNDS, STEPS, SimulatedKill, expected_final_weights, joined_task, new_service,
                            new_services, register_and_join, serving, spec_document, step_until_the_first_is_done)

from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_PASS
from trolly.chain.tx import decode_tx
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import parse_spec
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.compute.worker import plan
from trolly.compute.worker.progress import WorkerState
from trolly.wallet.market_views import TaskView


@pytest.fixture(scope="module")
def dataset_blobs():
    return build_dataset("digits")


@pytest.fixture
def world(make_chain, dataset_blobs, tmp_path):
    chain, market, task_id, spec = joined_task(make_chain, dataset_blobs)
    home = tmp_path / "worker"
    home.mkdir()
    WorkerState.load(home).add_task(task_id, hashlib.sha256(spec).hexdigest(), 0)  # as after a successful join
    return chain, market, task_id, home, spec


def run(coroutine):
    return asyncio.run(coroutine)


async def drive(service, chain, market, task_id, max_steps=60, vote=True):
    """Step the worker; between steps let blocks pass and (optionally) have the validator vote PASS."""
    context = await service.prepare(service.state.task(task_id))
    for _ in range(max_steps):
        if not await service.step(context):
            return True
        view = market.task(task_id)
        if view["phase"] == "sampling":
            chain.advance(1)
        elif view["phase"] == "verify" and vote:
            market.vote(chain.operators, task_id, VERDICT_PASS)
    return False


def killed_at_the_first_broadcast(world, when: str):
    """A service on the world's home and first worker, "killed" at its first broadcast (`when`: "before" it is
    sent or "after" its inclusion), as SIGKILL would stop it; the dead service."""
    chain, market, task_id, home, spec = world
    first = new_service(home, chain, market.workers[0])
    first.market.kill = when
    with pytest.raises(SimulatedKill):
        run(drive(first, chain, market, task_id))
    return first


def test_the_loop_trains_commits_aggregates_verified_updates_and_reports_the_final_weights(world, dataset_blobs,
                                                                                            monkeypatch):
    from trolly.compute.worker import service as service_module
    measured = []
    measure = service_module.measure_trainer
    monkeypatch.setattr(service_module, "measure_trainer", lambda trainer: measured.append(trainer) or measure(trainer))
    chain, market, task_id, home, spec = world
    worker = market.workers[0]
    service = new_service(home, chain, worker)
    assert run(drive(service, chain, market, task_id))
    assert len(measured) == 1  # only before the first round: later rounds plan with the pace of the one before
    view = market.task(task_id)
    assert view["status"] == "completed"
    assert view["final_weights_hash"] == expected_final_weights(parse_spec(spec), dataset_from_blobs(dataset_blobs))
    member = TaskView.from_answer(view).member(encode_address(worker.address))
    assert member.rounds_passed == ROUNDS and member.paid > 0
    assert chain.nonce(worker) == 2 + ROUNDS + 1  # register, join, the rounds, the final report
    progress = WorkerState.load(home).task(task_id)
    assert progress.status == "finished" and progress.outcome == "task completed"
    assert all(progress.rounds[r].committed for r in range(ROUNDS + 1))
    assert service.store.has(view["final_weights_hash"])  # served after the task, the rest is deleted:
    assert not any(service.store.has(h) for r in range(ROUNDS) for h in progress.rounds[r].checkpoints)


def test_killed_after_signing_the_restart_sends_the_same_bytes_once(world):
    chain, market, task_id, home, spec = world
    worker = market.workers[0]
    first = killed_at_the_first_broadcast(world, "before")
    saved = WorkerState.load(home).task(task_id).rounds[0]
    assert saved.commit_tx and not saved.committed and market.round_commitments(task_id, 0) == {}

    second = new_service(home, chain, worker)
    assert run(drive(second, chain, market, task_id))
    assert second.market.broadcasts[0] == first.market.broadcasts[0] == bytes.fromhex(saved.commit_tx)
    assert chain.nonce(worker) == 2 + ROUNDS + 1
    assert market.task(task_id)["status"] == "completed"


def test_killed_after_inclusion_the_restart_does_not_commit_again(world):
    chain, market, task_id, home, spec = world
    worker = market.workers[0]
    first = killed_at_the_first_broadcast(world, "after")
    assert list(market.round_commitments(task_id, 0)) == [encode_address(worker.address)]
    assert not WorkerState.load(home).task(task_id).rounds[0].committed

    second = new_service(home, chain, worker)
    assert run(drive(second, chain, market, task_id))
    round_zero_commits = [raw for raw in second.market.broadcasts
                          if decode_tx(raw).body.nonce == decode_tx(first.market.broadcasts[0]).body.nonce]
    assert round_zero_commits == []  # nothing re-sent for round 0
    assert chain.nonce(worker) == 2 + ROUNDS + 1


def test_unverified_rounds_leave_the_weights_unchanged(world, dataset_blobs):
    chain, market, task_id, home, spec = world
    service = new_service(home, chain, market.workers[0])

    async def without_votes():
        context = await service.prepare(service.state.task(task_id))
        for _ in range(200):
            if not await service.step(context):
                return True
            if market.task(task_id)["phase"] != "commit":
                chain.advance(1)  # nobody votes: the verification window runs out
        return False

    assert run(without_votes())
    view = market.task(task_id)
    assert view["status"] == "completed"
    initial = GlobalState.initial(initial_weights(parse_spec(spec), dataset_from_blobs(dataset_blobs).shape))
    (report,) = view["round_details"][ROUNDS]["commitments"]
    assert report["start_weights_hash"] == initial.weights_hash().hex()  # the worker reported W_0 as W_R
    assert report["outcome"] == "unverified" and view["final_weights_hash"] == ""  # nobody verified it: no result
    assert all(c["outcome"] == "unverified" for d in view["round_details"][:ROUNDS] for c in d["commitments"])


def test_a_member_that_dies_after_a_verified_round_still_counts_and_the_task_completes(make_chain, dataset_blobs,
                                                                                       tmp_path):
    """Two workers; both commit round 0, which is verified; then worker 1 dies (its blob service with it).
    Worker 0 must still build W_1 from both round-0 updates (it mirrored worker 1's while verification ran),
    finish the task alone, and report the final weights an independent computation predicts."""
    chain = make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    spec = spec_document(dataset_blobs.manifest_hash)
    services = new_services(tmp_path, chain, market.workers[:2])

    async def scenario():
        async with serving(services):
            task_id, contexts = await register_and_join(market, services, spec)

            async def between(alive):
                view = market.task(task_id)
                if view["phase"] == "verify":
                    market.vote(chain.operators, task_id, VERDICT_PASS)
                elif view["phase"] == "sampling" or plan.committed_on_chain(TaskView.from_answer(view), view["round"],
                                                                             services[0].address):
                    chain.advance(1)
                if market.task(task_id)["round"] == 1 and alive[1]:
                    alive[1] = False  # worker 1 dies before round 1: no more steps, and its blob service is gone
                    await services[1].server.stop()

            await step_until_the_first_is_done(services, contexts, between, turns=200)
            return task_id

    task_id = run(scenario())
    view = market.task(task_id)
    assert view["status"] == "completed"
    members = {m["index"]: m for m in view["members"]}
    assert members[1]["status"] == "dropped" and members[1]["rounds_passed"] == 1 and members[1]["paid"] > 0
    assert members[0]["rounds_passed"] == ROUNDS

    parsed, dataset = parse_spec(spec), dataset_from_blobs(dataset_blobs)
    codec = get_codec(parsed.codec)
    feedbacks = {0: ErrorFeedback(codec), 1: ErrorFeedback(codec)}

    def update(state, worker, round_index):
        result = run_round(Trainer(parsed, dataset), state.weights, worker_index=worker, round_index=round_index,
                           steps=STEPS)
        encoded, _ = feedbacks[worker].encode(result.pseudo_gradient)
        return WorkerUpdate(worker, result.samples_processed, codec.decode(encoded))

    state = GlobalState.initial(initial_weights(parsed, dataset.shape))
    state = outer_step(state, [update(state, 0, 0), update(state, 1, 0)], parsed.training.outer_optimizer)
    state = outer_step(state, [update(state, 0, 1)], parsed.training.outer_optimizer)
    assert view["final_weights_hash"] == state.weights_hash().hex()


def test_a_saved_commitment_whose_nonce_was_taken_is_signed_again_with_the_same_content(world):
    from trolly.chain.proto import market_pb2 as pb
    from trolly.compute.worker.commits import decode_commit

    chain, market, task_id, home, spec = world
    worker = market.workers[0]
    first = killed_at_the_first_broadcast(world, "before")
    saved = bytes.fromhex(WorkerState.load(home).task(task_id).rounds[0].commit_tx)
    # Meanwhile the same key signs something else (a wallet on another machine): the saved nonce is used up.
    other = chain.tx(worker, pb.MsgUpdateWorker(blob_url="http://127.0.0.1:9999"), nonce=chain.nonce(worker))
    assert chain.block(other).tx_results[0].ok
    second = new_service(home, chain, worker)
    assert run(drive(second, chain, market, task_id))
    resent, fresh = second.market.broadcasts[0], second.market.broadcasts[1]
    assert resent == saved and fresh != saved
    assert decode_commit(fresh) == decode_commit(saved)  # same commitment, new nonce
    assert decode_tx(fresh).body.nonce == decode_tx(saved).body.nonce + 1
    assert list(market.round_commitments(task_id, 0)) == [encode_address(worker.address)]
    assert market.task(task_id)["status"] == "completed"


def test_the_worker_registers_once_and_joins_only_a_task_it_fits(make_chain, dataset_blobs, tmp_path):
    from trolly.compute.determinism import INSTRUCTION_SETS, current_instruction_set
    from trolly.compute.worker.preflight import measure

    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    other_isa = next(name for name in INSTRUCTION_SETS if name != current_instruction_set())
    specs = [spec_document(dataset_blobs.manifest_hash, determinism={"threads": 1, "instruction_set": other_isa}),
             spec_document(dataset_blobs.manifest_hash, determinism={"threads": 4096}),
             spec_document(dataset_blobs.manifest_hash)]
    task_ids = [market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), workers=1, rounds=ROUNDS,
                              samples_per_worker=1) for spec in specs]
    worker = market.workers[0]
    service = new_service(tmp_path, chain, worker)
    service.preflight = measured = measure(tmp_path, "cpu", duration=0.05)
    moved = dataclasses.replace(service.config, public_url="https://worker.example")

    async def scenario():
        await service.server.start()
        try:
            await service._register()
            registered_nonce = chain.nonce(worker)
            await service._register()  # already registered, same URL: nothing sent
            assert chain.nonce(worker) == registered_nonce
            assert await service.find_and_join()
            assert not await service.find_and_join()  # nothing else fits
            service.config = moved  # restarted with a public URL: the record follows
            await service._register()
            assert chain.query(f"/market/worker/{service.address}")["blob_url"] == "https://worker.example"
            service.config = dataclasses.replace(moved, public_url="")
            await service._register()  # and back
        finally:
            await service.server.stop()

    run(scenario())
    record = chain.query(f"/market/worker/{service.address}")
    assert record["stake"] == MARKET_PARAMS["min_worker_stake"] and record["blob_url"] == service.server.url
    assert record["hardware"] == {"device": "cpu", "samples_per_second": int(measured.samples_per_second),
                                  "memory_mb": measured.memory_mb, "threads": measured.cores}  # all measured
    assert service.unfit == set(task_ids[:2])
    assert list(service.state.tasks) == [task_ids[2]] and service.state.task(task_ids[2]).worker_index == 0
    assert market.task(task_ids[2])["status"] == "running"


def test_a_task_joined_just_before_a_kill_is_adopted_from_the_chain(make_chain, dataset_blobs, tmp_path):
    chain, market, task_id, spec = joined_task(make_chain, dataset_blobs)  # joined, but the worker died before saving it
    service = new_service(tmp_path, chain, market.workers[0])
    assert service.state.tasks == {}
    run(service.adopt_joined_tasks())
    progress = WorkerState.load(tmp_path).task(task_id)
    assert progress.worker_index == 0 and progress.spec_hash == hashlib.sha256(spec).hexdigest()
    assert run(drive(service, chain, market, task_id))
    assert market.task(task_id)["status"] == "completed"


def test_run_rides_out_a_node_outage_and_stops_after_max_tasks(world, caplog):
    from trolly.compute.worker.config import WorkerConfig
    from trolly.compute.worker.service import ServiceOptions, WorkerService
    from worker_helpers import ChainMarket

    chain, market, task_id, home, spec = world
    worker = market.workers[0]
    chain_market = ChainMarket(chain, worker)
    chain_market.auto_blocks = True  # nobody votes: rounds settle unverified as blocks pass
    chain_market.outages = 1
    service = WorkerService(home, WorkerConfig(key_name="worker", blob_port=0, allow_private_blob_hosts=True), worker,
                            ServiceOptions(poll_interval=0.01, max_tasks=1), market=chain_market)
    with caplog.at_level("INFO", logger="trolly.worker"):
        run(asyncio.wait_for(service.run(), 120))
    assert market.task(task_id)["status"] == "completed"
    messages = [r.getMessage() for r in caplog.records]
    assert any("connection refused" in m and "retrying" in m for m in messages)
    assert messages[-1] == "finished 1 task(s); stopping"
    assert chain.nonce(worker) == 2 + ROUNDS + 1


def test_a_worker_that_left_while_it_trained_commits_nothing_and_finishes(world, monkeypatch):
    """`trolly-worker leave` sent while the service trains a round: the service sees it is no longer an active
    member before committing, sends nothing and finishes the task (docs/protocol.md 4.1c)."""
    from trolly.chain.proto import market_pb2 as pb
    chain, market, task_id, home, spec = world
    worker = market.workers[0]
    service = new_service(home, chain, worker)
    train = service._train_round

    async def train_then_leave(context, round_index, state):
        trained = await train(context, round_index, state)
        result = chain.deliver(worker, pb.MsgLeaveTask(task_id=task_id))
        assert result.ok, result.log
        return trained

    monkeypatch.setattr(service, "_train_round", train_then_leave)
    assert run(drive(service, chain, market, task_id))
    assert service.market.broadcasts == [] and market.round_commitments(task_id, 0) == {}
    assert market.task(task_id)["status"] == "abandoned"  # its only member left
    progress = WorkerState.load(home).task(task_id)
    assert progress.status == "finished" and not progress.rounds[0].committed
