"""A worker replacing a member who left a running task (docs/protocol.md 4.1c), against the real market state
machine in process (`worker_helpers.ChainMarket`): it derives the current round's start with the shared weights
follower before it joins (a worker that cannot gives up the slot with no collateral locked), joins the open
slot, waits for its first round while mirroring, and trains it; the task completes with the final weights an
independent computation predicts, and everyone is paid for its own verified rounds."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from market_helpers import MARKET_PARAMS, Market
from worker_helpers import new_services, register_and_join, serving

from trolly.chain.crypto import encode_address
from trolly.chain.market.records import VERDICT_PASS
from trolly.compute.blobs import AddressPolicy
from trolly.compute.codecs import ErrorFeedback, get_codec
from trolly.compute.data import build_dataset, dataset_from_blobs
from trolly.compute.outer_step import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import example_spec, parse_spec
from trolly.compute.training import Trainer, initial_weights, run_round
from trolly.compute.worker import plan
from trolly.wallet.market_views import TaskView

ROUNDS = 4
STEPS = 8


@pytest.fixture(scope="module")
def dataset_blobs():
    return build_dataset("digits")


def four_round_spec(manifest_hash: str) -> bytes:
    document = example_spec(manifest_hash, model={"arch": "mlp", "config": {"hidden": [16]}}, codec="int8",
                            training={"rounds": ROUNDS, "inner_steps": STEPS, "batch_size": 8, "checkpoint_every": 4,
                                      "seed": 11,
                                      "inner_optimizer": {"name": "adamw", "lr": 0.001, "weight_decay": 0.0},
                                      "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9}})
    return json.dumps(document).encode()


def expected_final_weights(spec_bytes: bytes, dataset, trained_by: list[list[tuple[int, str]]]) -> str:
    """W_R when round r's passed updates are those of the (worker index, member) pairs in `trained_by[r]`, each
    member with its own error feedback from zero in the first round it trains, computed without the service."""
    spec = parse_spec(spec_bytes)
    codec = get_codec(spec.codec)
    feedbacks: dict[str, ErrorFeedback] = {}
    state = GlobalState.initial(initial_weights(spec, dataset.shape))
    for round_index, indexes in enumerate(trained_by):
        updates = []
        for index, member in indexes:
            result = run_round(Trainer(spec, dataset), state.weights, worker_index=index, round_index=round_index,
                               steps=STEPS)
            encoded, _ = feedbacks.setdefault(member, ErrorFeedback(codec)).encode(result.pseudo_gradient)
            updates.append(WorkerUpdate(index, result.samples_processed, codec.decode(encoded)))
        state = outer_step(state, updates, spec.training.outer_optimizer)
    return state.weights_hash().hex()


def test_a_replacement_derives_the_start_before_joining_trains_from_the_next_round_and_is_paid_its_own(
        make_chain, dataset_blobs, tmp_path, caplog):
    chain = make_chain(accounts=4, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    spec = four_round_spec(dataset_blobs.manifest_hash)
    keys = market.workers[:3]  # two opening members, then the replacement
    services = new_services(tmp_path, chain, keys)
    replacement = services[2]
    replacement_balance = {}
    refused_join = {}

    async def scenario():
        async with serving(services):
            task_id, joined = await register_and_join(market, services, spec, members=2, memory_mb=4096)
            contexts = dict(enumerate(joined))
            for _ in range(400):
                view = TaskView.from_answer(market.task(task_id))
                if view.round == 1 and 1 in contexts:
                    del contexts[1]  # worker 1 dies before round 1: no more steps, its blob service gone
                    await services[1].server.stop()
                if view.open_slots and 2 not in contexts:
                    replacement_balance["before"] = chain.balance(keys[2])
                    # First out of reach of every member's blob service: the start cannot be derived, no join.
                    replacement.addresses = AddressPolicy(allow_private=False)
                    assert not await replacement.find_and_join()
                    refused_join["balance"] = chain.balance(keys[2])
                    refused_join["view"] = market.task(task_id)
                    replacement.addresses = AddressPolicy(allow_private=True)
                    assert await replacement.find_and_join()
                    contexts[2] = await replacement.prepare(replacement.state.task(task_id))
                for index in list(contexts):
                    if not await services[index].step(contexts[index]):
                        del contexts[index]
                if 0 not in contexts:
                    break
                view = TaskView.from_answer(market.task(task_id))
                if view.phase == "verify":
                    market.vote(chain.operators, task_id, VERDICT_PASS)
                elif view.phase == "sampling" or plan.committed_on_chain(view, view.round, services[0].address):
                    chain.advance(1)
            return task_id

    with caplog.at_level(logging.WARNING, logger="trolly.worker"):
        task_id = asyncio.run(scenario())
    assert refused_join["balance"] == replacement_balance["before"]  # gave up the slot: nothing locked
    assert refused_join["view"]["open_slots"] == 1
    assert encode_address(keys[2].address) not in {m["worker"] for m in refused_join["view"]["members"]}
    assert any("not joining as a replacement" in r.getMessage() for r in caplog.records)

    view = market.task(task_id)
    assert view["status"] == "completed" and view["replacements"] == 1
    members = {m["worker"]: m for m in view["members"]}
    opening, leaver, newcomer = (members[encode_address(k.address)] for k in keys)
    assert (leaver["status"], leaver["rounds_passed"]) == ("dropped", 1)
    assert (newcomer["index"], newcomer["first_round"], newcomer["rounds_passed"]) == (1, 3, 1)
    assert opening["rounds_passed"] == ROUNDS
    round_3 = {c["worker"]: c for c in view["round_details"][3]["commitments"]}
    assert newcomer["paid"] == round_3[newcomer["worker"]]["paid"] > 0  # paid for its own verified round only
    assert chain.balance(keys[2]) == replacement_balance["before"] + newcomer["paid"]  # collateral back in full
    # Round 0 by both opening members, rounds 1 and 2 by worker 0 alone, round 3 by worker 0 and the replacement
    # in slot 1 (its residual from zero): the replacement started from the W_3 everyone derives.
    first, left, new = (0, "first"), (1, "left"), (1, "replacement")
    assert view["final_weights_hash"] == expected_final_weights(spec, dataset_from_blobs(dataset_blobs),
                                                                [[first, left], [first], [first], [first, new]])


def test_a_replacement_fetches_a_packed_dataset_from_the_members_keeping_what_it_has_across_a_failure(tmp_path):
    """A requester's own (packed) dataset whose requester no longer serves it: the replacement fetches it from
    the members. A member that lacks a shard stops the fetch; what came before is kept, and the next try, from a
    member that has everything, fetches only the rest."""
    import dataclasses

    import numpy as np
    from market_view_helpers import member_answer, task_answer

    from trolly.compute.blobs import BlobServer, BlobStore
    from trolly.compute.blobs.errors import BlobError
    from trolly.compute.data.manifest import SPLITS, parse_manifest
    from trolly.compute.data.packing import pack_file
    from trolly.compute.worker.replacement import fetch_dataset_from_members

    generator = np.random.default_rng(0)
    rows = "".join(f"{generator.normal(i % 2 * 3, 1):.3f},{generator.normal(0, 1):.3f},{'ab'[i % 2]}\n"
                   for i in range(60))
    (tmp_path / "data.csv").write_text("a,b,label\n" + rows)
    blobs, _, _ = pack_file(tmp_path / "data.csv")
    manifest = parse_manifest(blobs.manifest)
    shards = [entry["hash"] for split in SPLITS for entry in manifest["splits"][split]["shards"]]
    assert len(shards) >= 2
    complete, partial = BlobStore(tmp_path / "complete"), BlobStore(tmp_path / "partial")
    for digest, data in blobs.all_blobs().items():
        complete.put(data, expected=digest)
        if digest != shards[-1]:
            partial.put(data, expected=digest)
    parsed = parse_spec(four_round_spec(blobs.manifest_hash))
    spec = dataclasses.replace(parsed, dataset=dataclasses.replace(
        parsed.dataset, name="packed", urls=(), input_size=manifest["input_size"],
        num_classes=manifest["num_classes"]))
    assert spec.dataset.packed
    mine = BlobStore(tmp_path / "replacement")
    addresses = AddressPolicy(allow_private=True)

    async def fetch_from(store: BlobStore) -> int:
        async with BlobServer(store) as server:
            view = TaskView.from_answer(task_answer(members=[member_answer(blob_url=server.url)]))
            return await fetch_dataset_from_members(mine, spec, view, addresses)

    with pytest.raises(BlobError):
        asyncio.run(fetch_from(partial))  # this member lacks the last shard
    assert mine.has(blobs.manifest_hash) and all(mine.has(digest) for digest in shards[:-1])
    assert not mine.has(shards[-1])
    assert asyncio.run(fetch_from(complete)) == 1  # only what it lacked
    assert all(mine.has(digest) for digest in shards)
