"""Committees of GPU-trained commitments drawn only from validators that replay that GPU (issue 26 item 7): a
validator's operator declares the GPU parts its verifier replays (`MsgDeclareReplayGpus`), a commitment whose
determinism profile names a GPU part is sampled with committees drawn from those validators only, a CPU
profile's from every validator as before. No minority decides a GPU verdict (issue 32 item 1): a GPU profile is
accepted at commit only while its declared replayers hold more than a third of the power, a profile the chain
does not know is refused, a dispute goes to the whole validator set, and a false declaration costs its maker."""

from __future__ import annotations

from market_helpers import CPU_PROFILE, MARKET_PARAMS, Market, assert_fails, commit_message, event_actions
from market_helpers import verdict_message
from trolly.chain.crypto import encode_address
from trolly.chain.market import profiles
from trolly.chain.market.errors import InvalidReplayGpus, NotValidator, TooFewReplayers, UnknownProfile
from trolly.chain.market.profiles import check_profile_form
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.market.replay_gpus import get_replay_gpus, gpu_part_of
from trolly.chain.proto import market_pb2 as pb

H100 = "gpu-NVIDIA-H100-80GB-HBM3+driver-550.54.15+cuda-12.4"
A100 = "gpu-NVIDIA-A100-SXM4-40GB+driver-535.104.05+cuda-12.2"


def gpu_profile(gpu: str) -> str:
    return f"torch-2.13.0+cu130/threads-1/isa-avx2/{gpu}/deterministic-ftz"


def test_a_gpu_part_is_read_from_a_profile_and_a_cpu_profile_has_none():
    assert gpu_part_of(gpu_profile(H100)) == H100
    assert gpu_part_of("torch-2.13.0+cpu/threads-1/isa-avx2/deterministic-ftz") is None
    assert gpu_part_of("torch-2.13.0/threads-1/isa-avx2/gpu-x/deterministic-ftz") is None


def test_a_validator_declares_replaces_and_withdraws_its_gpus_and_nobody_else_may(make_chain):
    chain = make_chain(accounts=2, validators=2)
    operator = chain.operators[0]
    result = chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=[H100, A100]))
    assert result.ok, result.log
    assert get_replay_gpus(chain.state, operator.address) == sorted([H100, A100])
    assert [dict(e.attributes) for e in result.events if e.type == "replay_gpus"] == [
        {"operator": encode_address(operator.address), "gpus": ",".join(sorted([H100, A100]))}]
    assert chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=[A100])).ok
    assert get_replay_gpus(chain.state, operator.address) == [A100]
    assert chain.deliver(operator, pb.MsgDeclareReplayGpus()).ok
    assert get_replay_gpus(chain.state, operator.address) == []
    stranger = chain.accounts[1]
    assert_fails(chain.deliver(stranger, pb.MsgDeclareReplayGpus(gpus=[H100])), NotValidator)
    assert get_replay_gpus(chain.state, stranger.address) == []


def test_a_malformed_list_is_refused(make_chain):
    chain = make_chain(accounts=1, validators=1)
    operator = chain.operators[0]
    for gpus in ([H100, H100], ["gpu-x"], ["isa-avx2"], [H100 + "x" * 128],
                 [f"gpu-G{i}+driver-1+cuda-12" for i in range(9)]):
        assert_fails(chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=gpus)), InvalidReplayGpus)
    assert get_replay_gpus(chain.state, operator.address) == []


def gpu_market(make_chain, declared, stakes=None, round_blocks=5, **params):
    """A running two-worker task after operator i declared `declared[i]` (its stake `stakes[i]`)."""
    chain = make_chain(accounts=3, validators=len(declared), stakes=stakes,
                       params={"market": {**MARKET_PARAMS, "committee_size": 3, **params}})
    market = Market(chain)
    for operator, gpus in zip(chain.operators, declared):
        assert chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=gpus)).ok
    task_id = market.open_task(workers=2, collateral=4 * 10**6, samples_per_worker=1, round_blocks=round_blocks)
    return chain, market, task_id


def commit_profiles(chain, market, task_id, profiles):
    """One block in which worker i commits round 0 with `profiles[i]`; its results."""
    return chain.block(*[chain.tx(worker, commit_message(task_id, 0, worker.address.hex(), determinism_profile=profile))
                         for worker, profile in zip(market.workers, profiles)]).tx_results


def committees_of(make_chain, profiles, declared):
    """Round 0 of a two-worker task committed with `profiles` (one per worker) after operator i declared
    `declared[i]`: (chain, market, task id, committee operators per worker, the sampling block)."""
    chain, market, task_id = gpu_market(make_chain, declared)
    assert all(r.ok for r in commit_profiles(chain, market, task_id, profiles))
    sampled = chain.block()
    by_worker = {}
    for commitment in market.task(task_id)["round_details"][0]["commitments"]:
        by_worker[commitment["worker"]] = {member for committee in commitment["committees"] for member in committee}
    return chain, market, task_id, [by_worker[encode_address(w.address)] for w in market.workers[:2]], sampled


def test_a_gpu_commitment_is_drawn_only_validators_that_replay_its_gpu_and_a_cpu_one_any(make_chain):
    chain, market, task_id, committees, sampled = committees_of(
        make_chain, [gpu_profile(H100), CPU_PROFILE], [[H100], [H100, A100], []])
    assert event_actions(sampled, "segments_sampled")
    operators = [encode_address(op.address) for op in chain.operators]
    assert committees[0] == set(operators[:2])  # only the H100 verifiers judge the H100 segments
    assert committees[1] == set(operators)  # a CPU profile: every validator, as before
    escalated = {c["worker"]: c["escalated"] for c in market.task(task_id)["round_details"][0]["commitments"]}
    assert escalated == {encode_address(market.workers[0].address): [0],  # a sampled committee: must agree
                         encode_address(market.workers[1].address): [1]}  # the whole set already


def test_a_minimum_stake_lone_declarer_is_no_committee_and_its_dissent_loses_at_the_whole_set(make_chain):
    """Attack (issue 32 item 1): a validator of the smallest stake, alone in declaring a GPU, voted FAIL on an honest
    worker's GPU round without replaying and took its collateral. Now the commitment is refused (its replayers
    hold no more than a third of the power), naming the GPU, their power and what is needed. Once enough
    validators declare it too, the lone FAIL is a dissent: the whole set (its CPU replayers included) passes the
    segment, the worker keeps its collateral and is paid, and the liar pays the losing verdict's penalty."""
    stakes = [1_000_000] + [10 * 10**6] * 4  # powers 1, 10, 10, 10, 10
    chain, market, task_id = gpu_market(make_chain, [[H100], [], [], [], []], stakes)
    refused = commit_profiles(chain, market, task_id, [gpu_profile(H100)] * 2)
    for result in refused:
        assert_fails(result, TooFewReplayers)
        assert H100 in result.log and "hold 1 of 41 power" in result.log and "(14 or more)" in result.log
    assert market.task(task_id)["round_details"][0]["commitments"] == []

    liar, replayers = chain.operators[0], chain.operators[1:3]
    for operator in replayers:
        assert chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=[H100])).ok  # 21 of 41: more than a third
    assert all(r.ok for r in commit_profiles(chain, market, task_id, [gpu_profile(H100)] * 2))
    chain.block()  # sampled: each committee is the three declarers
    victim = encode_address(market.workers[0].address)
    for commitment in market.round_commitments(task_id, 0).values():
        assert set(commitment["committees"][0]) == {encode_address(op.address) for op in [liar, *replayers]}
    items = {w: [i for i in market.to_verify(replayers[0]) if i["worker"] == w][0]
             for w in market.round_commitments(task_id, 0)}
    votes = [(liar, items[victim], VERDICT_FAIL)] + [(op, item, VERDICT_PASS) for item in items.values()
                                                       for op in replayers]
    votes += [(liar, item, VERDICT_PASS) for w, item in items.items() if w != victim]
    output = chain.block(*[chain.tx(op, verdict_message(op, task_id, item, v)) for op, item, v in votes])
    assert all(r.ok for r in output.tx_results) and event_actions(output, "slash") == []
    outputs = chain.advance(MARKET_PARAMS["verification_window"])
    assert [a["size"] for o in outputs for a in event_actions(o, "committee_escalated")] == ["5"]
    cpu_replayers = chain.operators[3:]
    output = chain.block(*[chain.tx(op, verdict_message(op, task_id, items[victim], VERDICT_PASS))
                           for op in cpu_replayers])
    assert event_actions(output, "segment_decided")[0]["decision"] == "pass"
    member = next(m for m in market.task(task_id)["members"] if m["worker"] == victim)
    assert (member["status"], member["slashed"], member["collateral"]) == ("active", 0, 4 * 10**6)
    assert member["paid"] > 0
    votes = market.round_commitments(task_id, 0)[victim]["verdicts"]  # read before the reveal window deletes them
    assert {v["validator"] for v in votes if v["verdict"] == "pass"} == {  # 30 of 41 decided: the last came late
        encode_address(op.address) for op in [*replayers, cpu_replayers[0]]}
    outputs = chain.advance(20)
    losing = [(a["validator"], a["verdict"]) for o in outputs for a in event_actions(o, "losing_verdict")]
    assert losing == [(encode_address(liar.address), "fail")]


def test_a_made_up_gpu_used_by_its_own_worker_is_refused_at_commit(make_chain):
    """Attack (issue 32 item 1): a validator declared a GPU nobody else has, its own worker trained "on" it, and it
    passed that worker's forged round alone. Now that profile is refused: its only replayer holds no more than a
    third of the power; and a GPU nobody declared at all is a profile the chain does not know."""
    made_up = "gpu-Forge-9000+driver-1.0+cuda-12.4"
    chain, market, task_id = gpu_market(make_chain, [[made_up], [], []])
    made, nobody = commit_profiles(chain, market, task_id, [gpu_profile(made_up), gpu_profile(A100)])
    assert_fails(made, TooFewReplayers)
    assert_fails(nobody, UnknownProfile)
    assert "no validator declared" in nobody.log
    assert market.task(task_id)["round_details"][0]["commitments"] == []


def test_a_profile_the_chain_does_not_know_is_refused_at_commit(make_chain):
    """Attack (issue 32 item 1): `commit_round` took any profile string, so a worker could name one no verifier
    replays. Now only the protocol's CPU form (a replayable instruction set, at most 64 threads) or a declared GPU
    is accepted."""
    chain, market, task_id = gpu_market(make_chain, [[], [], []], round_blocks=50)
    worker = market.workers[0]
    for profile in ("cpu-x86_64-avx2-t1", "torch-2.13.0+cpu/threads-1/isa-avx512/deterministic-ftz",
                    "torch-2.13.0+cpu/threads-65/isa-avx2/deterministic-ftz",
                    "torch-2.13.0+cpu/threads-0/isa-avx2/deterministic-ftz",
                    "torch-2.13.0+cpu/threads-1/isa-avx2/nondeterministic", "torch-2.13.0+cpu/threads-1/isa-avx2",
                    "torch-2.13.0+cpu/threads-1/isa-avx2/gpu-x/deterministic-ftz"):
        result = chain.deliver(worker, commit_message(task_id, 0, "w", determinism_profile=profile))
        assert_fails(result, UnknownProfile)
    for profile in (CPU_PROFILE, "torch-2.13.0+cpu/threads-64/isa-default/deterministic-ftz"):
        check_profile_form(profile)


def test_the_chains_profile_form_is_what_the_worker_and_the_verifier_use():
    """The chain cannot import compute: its copy of the profile form must stay the workers' and verifiers'."""
    from trolly.compute.determinism import MODE, DeterminismProfile
    from trolly.compute.instruction_sets import REPLAYABLE_INSTRUCTION_SETS
    from trolly.verifier.replay_profile import MAX_REPLAY_THREADS

    assert profiles.REPLAYABLE_INSTRUCTION_SETS == REPLAYABLE_INSTRUCTION_SETS
    assert (profiles.MAX_PROFILE_THREADS, profiles.MODE) == (MAX_REPLAY_THREADS, MODE)
    for instruction_set in REPLAYABLE_INSTRUCTION_SETS:
        check_profile_form(DeterminismProfile(threads=2, instruction_set=instruction_set).id)
    check_profile_form(gpu_profile(H100).replace("torch-2.13.0+cu130", f"torch-{torch_version()}"))


def torch_version() -> str:
    import torch

    return torch.__version__


def test_a_gpu_whose_replayers_withdrew_since_the_commit_goes_to_the_whole_set_at_once(make_chain):
    chain, market, task_id = gpu_market(make_chain, [[H100], [H100], []])
    assert all(r.ok for r in commit_profiles(chain, market, task_id, [gpu_profile(H100)] * 2))
    assert chain.deliver(chain.operators[1], pb.MsgDeclareReplayGpus()).ok  # 1 of 3 left: not more than a third
    chain.block()
    for commitment in market.round_commitments(task_id, 0).values():
        assert commitment["escalated"] == [1] and commitment["drawn"] == [0]
        assert set(commitment["committees"][0]) == {encode_address(op.address) for op in chain.operators}


def test_a_declarer_drawn_for_a_gpu_segment_that_does_not_vote_pays_the_lazy_penalty(make_chain):
    """A false declaration costs its maker: a validator that declared a GPU it cannot replay, drawn onto its
    committee, votes nothing; when the round's reveals close it pays `lazy_verifier_penalty` per such segment."""
    chain, market, task_id = gpu_market(make_chain, [[H100], [H100], []], lazy_verifier_penalty=500_000)
    assert all(r.ok for r in commit_profiles(chain, market, task_id, [gpu_profile(H100)] * 2))
    chain.block()
    honest, absent = chain.operators[:2]
    market.vote([honest], task_id, VERDICT_PASS)
    chain.advance(MARKET_PARAMS["verification_window"])  # unanimous but short of two thirds: the whole set
    market.vote([chain.operators[2]], task_id, VERDICT_PASS)  # 2 of 3: decided
    market.reveal(task_id)
    outputs = chain.advance(20)
    absent_events = [(a["validator"], a["penalty"]) for o in outputs for a in event_actions(o, "absent_verifier")]
    assert absent_events == [(encode_address(absent.address), "500000")] * 2
    assert [a for o in outputs for a in event_actions(o, "lazy_verifier")] == []


def test_a_verifier_with_a_gpu_declares_it_once_and_one_without_declares_nothing(tmp_path):
    import asyncio

    from trolly.chain.state import State
    from trolly.verifier.service import ServiceConfig, VerifierService
    from trolly.wallet.rpc import AsyncRpcClient
    from verifier_scenario import VALIDATOR, market_node

    with market_node([]) as node:
        def declared() -> list[str]:
            return get_replay_gpus(State(node.store), VALIDATOR.address)

        async def passes(gpu: str | None, home) -> int:
            config = ServiceConfig(home=home, node=node.url, websocket=False, poll_interval=0.1)
            service = VerifierService(config, VALIDATOR, AsyncRpcClient(node.url))
            service.replayer.gpu = gpu  # as on a machine with that GPU, or none (this one has no CUDA)
            try:
                for _ in range(2):
                    await service.run_once()
            finally:
                await service.close()
            async with AsyncRpcClient(node.url) as client:
                return (await client.query_json(f"/account/{encode_address(VALIDATOR.address)}"))["nonce"]

        without = asyncio.run(passes(None, tmp_path / "cpu"))
        assert declared() == []
        assert asyncio.run(passes(H100, tmp_path / "gpu")) == without + 1  # one declaration for two passes
        assert declared() == [H100]
