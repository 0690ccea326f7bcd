"""Committees of GPU-trained commitments drawn only from validators that replay that GPU (issue 26 item 7): a
validator's operator declares the GPU parts its verifier replays (`MsgDeclareReplayGpus`), a commitment whose
determinism profile names a GPU part is sampled with committees drawn from those validators only, a CPU
profile's from every validator as before, and one whose GPU nobody declared settles unverified."""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, Market, assert_fails, commit_message, event_actions
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import InvalidReplayGpus, NotValidator
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


def committees_of(make_chain, profiles, declared):
    """Round 0 of a two-worker task committed with `profiles` (one per worker) after operator i declared
    `declared[i]`: (chain, market, task id, committee operators per worker, the sampling block)."""
    chain = make_chain(accounts=3, validators=3, params={"market": {**MARKET_PARAMS, "committee_size": 3}})
    market = Market(chain)
    for operator, gpus in zip(chain.operators, declared):
        assert chain.deliver(operator, pb.MsgDeclareReplayGpus(gpus=gpus)).ok
    task_id = market.open_task(workers=2)
    chain.block(*[chain.tx(worker, commit_message(task_id, 0, worker.address.hex(), determinism_profile=profile))
                  for worker, profile in zip(market.workers[:2], profiles)])
    sampled = chain.block()
    by_worker = {}
    for commitment in market.task(task_id)["round_details"][0]["commitments"]:
        by_worker[commitment["worker"]] = {member for committee in commitment["committees"] for member in committee}
    return chain, market, task_id, [by_worker[encode_address(w.address)] for w in market.workers[:2]], sampled


def test_a_gpu_commitment_is_drawn_only_validators_that_replay_its_gpu_and_a_cpu_one_any(make_chain):
    chain, market, task_id, committees, sampled = committees_of(
        make_chain, [gpu_profile(H100), "cpu-x86_64-avx2-t1"], [[H100], [A100], []])
    assert event_actions(sampled, "segments_sampled")
    operators = [encode_address(op.address) for op in chain.operators]
    assert committees[0] == {operators[0]}  # only the H100 verifier judges the H100 segments
    assert committees[1] == set(operators)  # a CPU profile: every validator, as before


def test_a_gpu_nobody_replays_gets_no_committee_and_settles_unverified(make_chain):
    chain, market, task_id, committees, _ = committees_of(
        make_chain, [gpu_profile(H100), gpu_profile(H100)], [[A100], [A100], []])
    assert committees == [set(), set()]
    while market.task(task_id)["round"] == 0:  # the verification window closes, the escalation finds nobody
        chain.block()
    outcomes = [c["outcome"] for c in market.task(task_id)["round_details"][0]["commitments"]]
    assert outcomes == ["unverified", "unverified"]
    assert all(m["status"] == "active" and m["paid"] == 0 and m["slashed"] == 0
               for m in market.task(task_id)["members"])


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
