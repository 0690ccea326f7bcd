"""`trolly-worker preflight` (issue 28 item 1): what this machine can do, measured; `init` runs it; what a worker
registers comes from it (a flag only lowers the memory); a task the measurement does not fit is never joined,
and `start --task` refuses it naming the requirement. The CUDA half of `--device` is checked on the CPU where it
can be (refusals, profiles); the GPU test skips without one."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os

import pytest
import torch
from click.testing import CliRunner

from trolly.chain.crypto import encode_address
from trolly.chain.market.footprint import model_footprint
from trolly.chain.market.params import MarketParams
from trolly.compute.data import build_dataset
from trolly.compute.determinism import DeterminismProfile
from trolly.compute.devices import cgroup_memory_limits, gpu_profile_part, is_device_name, machine_memory_mb
from trolly.compute.errors import DeterminismError
from trolly.compute.spec import parse_spec
from trolly.compute.worker.cli import main
from trolly.compute.worker.fit import on_device
from trolly.compute.worker.preflight import largest_model, measure, unfit_reasons
from trolly.compute.worker.preflight_record import Preflight
from market_helpers import MARKET_PARAMS, Market
from worker_helpers import ROUNDS, new_service, spec_document

NO_GPU = "this machine has no CUDA GPU"
H100 = gpu_profile_part("NVIDIA H100 80GB HBM3", "550.54.15", "12.4")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"TROLLY_WORKER_HOME": None,
                                                                 "TROLLY_WALLET_PASSWORD": None})


@pytest.fixture(scope="module")
def dataset_blobs():
    return build_dataset("digits")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Preflight:
    return measure(tmp_path_factory.mktemp("home"), "cpu", duration=0.05)


def test_preflight_json_reports_what_this_machine_measures(tmp_path):
    result = invoke("preflight", "--home", tmp_path / "w", "--device", "cpu", "-o", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["cores"] == os.cpu_count() and report["memory_mb"] == machine_memory_mb() > 0
    assert report["device"] == "cpu" and report["device_memory_mb"] == report["memory_mb"] and not report["gpu_profile"]
    assert report["instruction_set"] in report["cpu_instruction_sets"] and report["disk_free_mb"] > 0
    assert report["torch_version"] == torch.__version__ and report["samples_per_second"] > 0
    assert report["cuda_devices"] == [] or torch.cuda.is_available()
    assert report["reachability"] == {"checked": False, "reachable": False,
                                      "detail": "not checked: no probe given (trolly-worker preflight --probe URL)"}
    assert [model["arch"] for model in report["largest_models"]] == ["mlp", "cnn", "transformer", "lora-text"]
    for model in report["largest_models"]:
        if model["config"]:  # lora-text has none where its base model package is missing
            assert 0 < model["memory_mb"] <= min(report["memory_mb"], MarketParams().max_memory_mb)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA reports")
def test_preflight_text_says_there_is_no_cuda_device(tmp_path):
    result = invoke("preflight", "--home", tmp_path / "w")
    assert result.exit_code == 0, result.output
    assert "CUDA devices      none" in result.output and "trains on         cpu" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("device, message", [("cuda", "no CUDA GPU"), ("cuda:1", "no CUDA GPU"),
                                             ("tpu", "device must be one of"), ("cuda:x", "device must be one of")])
def test_a_device_this_machine_lacks_is_refused_by_preflight_and_init_writes_nothing(tmp_path, device, message):
    result = invoke("preflight", "--home", tmp_path / "p", "--device", device)
    assert result.exit_code != 0 and "Error:" in result.output and message in result.output
    home = tmp_path / "w"
    result = invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key",
                    "--node", "http://127.0.0.1:9", "--device", device)
    assert result.exit_code != 0 and "Error:" in result.output
    assert not home.exists() or not any(home.iterdir())


def test_init_measures_the_machine_and_keeps_the_measurement(tmp_path):
    home = tmp_path / "w"
    result = invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key",
                    "--node", "http://127.0.0.1:9", "--memory-mb", "512")
    assert result.exit_code == 0, result.output
    assert "Measured this machine" in result.output and "reference speed" in result.output
    kept = Preflight.from_json(json.loads((home / "preflight.json").read_text()))
    assert kept.cores == os.cpu_count() and kept.memory_mb == machine_memory_mb()
    assert json.loads((home / "worker.json").read_text())["memory_limit_mb"] == 512


def test_a_flag_only_lowers_the_declared_memory(measured):
    assert measured.hardware().memory_mb == measured.memory_mb
    assert measured.hardware(memory_limit_mb=measured.memory_mb * 4).memory_mb == measured.memory_mb
    assert measured.hardware(memory_limit_mb=100).memory_mb == 100
    assert measured.hardware().threads == os.cpu_count()
    assert measured.hardware(slowdown=2.0).samples_per_second == int(measured.samples_per_second / 2)


def test_the_memory_measured_is_the_lowest_control_group_limit(tmp_path):
    own = tmp_path / "cgroup"
    own.write_text("4:memory:/slice/job\n0::/unified/job\n")
    (tmp_path / "root" / "memory" / "slice" / "job").mkdir(parents=True)
    (tmp_path / "root" / "memory" / "slice" / "memory.limit_in_bytes").write_text(f"{3 << 30}\n")
    (tmp_path / "root" / "memory" / "slice" / "job" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "root" / "unified" / "job").mkdir(parents=True)
    (tmp_path / "root" / "unified" / "job" / "memory.max").write_text("max\n")
    (tmp_path / "root" / "unified" / "memory.max").write_text(f"{5 << 30}\n")
    assert sorted(cgroup_memory_limits(tmp_path / "root", own)) == [3 << 30, 5 << 30, 9223372036854771712]
    assert machine_memory_mb(tmp_path / "root", own) == min(3 << 10, machine_memory_mb(tmp_path / "none", own))
    assert cgroup_memory_limits(tmp_path / "root", tmp_path / "missing") == []


def test_the_largest_model_is_bounded_by_memory_where_memory_is_smaller(measured):
    model = largest_model("mlp", 600, MarketParams())
    assert model.limit == "memory" and model.memory_mb <= 600
    width = model.config["hidden"][0]
    assert model_footprint("mlp", {"hidden": [width + 1, width + 1]}, "digits", 32).memory_mb > 600
    assert largest_model("mlp", 100, MarketParams()).config == {}  # the runtime alone needs more


def test_unfit_reasons_name_each_requirement(measured, dataset_blobs):
    spec = spec_document(dataset_blobs.manifest_hash, determinism={"threads": 4096, "instruction_set": "avx512"},
                         model={"arch": "mlp", "config": {"hidden": [4096, 4096]}})
    small = dataclasses.replace(measured, device_memory_mb=300, instruction_set="avx2")
    reasons = unfit_reasons(small, spec)
    assert [reason.split(":")[0] for reason in reasons] == ["memory", "cores", "instruction set"]
    assert unfit_reasons(measured, spec_document(dataset_blobs.manifest_hash)) == []
    lowered = unfit_reasons(measured, spec_document(dataset_blobs.manifest_hash), memory_limit_mb=1)
    assert lowered[0].startswith("memory")
    assert unfit_reasons(measured, b"{not json")[0].startswith("the spec cannot be read")


def test_a_worker_whose_measured_memory_is_below_a_specs_needs_never_joins_it(make_chain, dataset_blobs, tmp_path):
    """The chain admits a task bigger than this machine (its bounds raised), the worker registers the memory it
    measured (no flag), and joins only the task that fits it."""
    memory = machine_memory_mb()
    width = 1024
    while model_footprint("mlp", {"hidden": [width] * 4}, "digits", 8).memory_mb <= memory:
        width *= 2
    chain = make_chain(accounts=2, validators=1, params={"market": {
        **MARKET_PARAMS, "max_memory_mb": 1 << 40, "max_model_parameters": 1 << 50}})
    market = Market(chain)
    specs = [spec_document(dataset_blobs.manifest_hash, model={"arch": "mlp", "config": {"hidden": [width] * 4}}),
             spec_document(dataset_blobs.manifest_hash)]
    task_ids = [market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), workers=1, rounds=ROUNDS,
                              samples_per_worker=1) for spec in specs]
    service = new_service(tmp_path, chain, market.workers[0])

    async def scenario():
        await service.server.start()
        try:
            await service._register()
            assert await service.find_and_join()
            assert not await service.find_and_join()
        finally:
            await service.server.stop()

    asyncio.run(scenario())
    registered = chain.query(f"/market/worker/{service.address}")["hardware"]
    assert registered["memory_mb"] == memory and registered["threads"] == os.cpu_count()
    assert service.unfit == {task_ids[0]} and list(service.state.tasks) == [task_ids[1]]
    assert market.task(task_ids[0])["members"] == [] and market.task(task_ids[0])["status"] == "open"


def test_a_cuda_device_number_is_a_device_and_its_profile_names_the_gpu(dataset_blobs):
    assert all(is_device_name(name) for name in ("cpu", "cuda", "cuda:0", "cuda:12"))
    assert not any(is_device_name(name) for name in ("gpu", "cuda:", "cuda:-1", "cuda0", "", None))
    profile = DeterminismProfile(instruction_set="avx2", device="cuda:1", gpu=H100)
    assert profile.id.endswith(f"/isa-avx2/{H100}/deterministic-ftz")
    with pytest.raises(DeterminismError, match="device must be"):
        DeterminismProfile(device="cuda:x")
    spec = parse_spec(spec_document(dataset_blobs.manifest_hash))
    assert on_device(spec, "cuda:1").determinism.device == "cuda:1" and spec.determinism.device == "cpu"
    assert on_device(spec, "cuda:1").determinism.threads == spec.determinism.threads


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_preflight_on_a_gpu_reports_it_and_declares_its_memory(tmp_path):
    preflight = measure(tmp_path, "cuda", duration=0.2)
    assert preflight.cuda_devices and preflight.device_memory_mb == preflight.cuda_devices[0].memory_mb
    assert preflight.gpu_profile.startswith("gpu-") and preflight.hardware().device.startswith("cuda gpu-")
    assert preflight.hardware().memory_mb == preflight.cuda_devices[0].memory_mb


def submit_spec(url: str, spec: bytes, budget: int = 100_000) -> int:
    """Submit a one-worker task with `spec` from the dev chain's funded key, planned as `task submit` plans it;
    its id."""
    from trolly.chain.crypto import encode_address
    from trolly.chain.hd import dev_key
    from trolly.chain.proto import market_pb2
    from trolly.wallet.market_queries import get_market_params
    from trolly.wallet.rpc import RpcClient
    from trolly.wallet.sender import TxSender
    from trolly.wallet.tasks import plan_task

    key = dev_key(0)
    with RpcClient(url, timeout=10) as client:
        params = client.run(get_market_params(client.async_client))
        plan = plan_task(spec, params, budget, None, 1, 1, None)
        message = market_pb2.MsgSubmitTask(
            spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=budget, workers=1, rounds=plan.rounds,
            reward_per_round=plan.reward_per_round, collateral=plan.collateral, join_blocks=1_000, round_blocks=400,
            samples_per_worker=1)
        sender = TxSender(client.async_client)

        async def go():
            planned = await sender.plan(encode_address(key.address), [message])
            return await sender.send(key, planned, wait=True, timeout=30)

        assert client.run(go()).included.code == 0
        return max(task["id"] for task in client.query_json("/market/tasks")["tasks"])


def test_start_refuses_a_named_task_it_cannot_fit_and_says_which_requirement(tmp_path, dataset_blobs):
    from dev_node import dev_node

    with dev_node(tmp_path / "node") as url:
        home = tmp_path / "w"
        result = invoke("init", "--home", home, "--key", "w", "--keyring-backend", "test", "--create-key",
                        "--node", url)
        assert result.exit_code == 0, result.output
        task_id = submit_spec(url, spec_document(dataset_blobs.manifest_hash, determinism={"threads": 64}))
        refused = invoke("start", "--home", home, "--task", task_id)
        assert refused.exit_code == 1, refused.output
        assert (f"Error: task {task_id} does not fit this worker: cores: the task trains with 64 threads, this "
                f"machine has {os.cpu_count()}") in refused.output
        fitting = submit_spec(url, spec_document(dataset_blobs.manifest_hash))
        lowered = invoke("start", "--home", home, "--task", fitting, "--memory-mb", "1")
        assert lowered.exit_code == 1 and "memory: the task needs an estimated" in lowered.output
        unknown = invoke("start", "--home", home, "--task", 999)
        assert unknown.exit_code != 0 and "Error:" in unknown.output and "999" in unknown.output
        assert not (home / "state.json").exists()  # nothing joined, nothing saved


def test_a_registered_record_is_updated_only_when_the_machine_changed(measured):
    from trolly.compute.worker.preflight import measured_differently
    from trolly.wallet.market_views import Hardware

    hardware = measured.hardware()
    on_chain = Hardware(device=hardware.device, samples_per_second=hardware.samples_per_second,
                        memory_mb=hardware.memory_mb, threads=hardware.threads)
    assert not measured_differently(on_chain, hardware)
    speed = hardware.samples_per_second  # varies between measurements on a shared machine: no transaction for it
    assert not measured_differently(dataclasses.replace(on_chain, samples_per_second=speed * 3), hardware)
    assert measured_differently(dataclasses.replace(on_chain, memory_mb=hardware.memory_mb + 1), hardware)
    assert measured_differently(dataclasses.replace(on_chain, threads=hardware.threads + 1), hardware)
    assert measured_differently(dataclasses.replace(on_chain, device="cuda"), hardware)


def test_a_gpu_worker_joins_no_task_while_no_validator_replays_its_gpu(make_chain, dataset_blobs, tmp_path, measured):
    """On a GPU no validator declared (`MsgDeclareReplayGpus`), no committee could judge its rounds: the worker
    stays out. The measurement is this machine's, given an H100's profile part (this machine has no GPU)."""
    from trolly.chain.proto import market_pb2 as pb
    from trolly.wallet.market_views import ReplayGpus

    on_gpu = dataclasses.replace(measured, device="cuda", gpu_profile=H100)
    spec = spec_document(dataset_blobs.manifest_hash)
    assert unfit_reasons(on_gpu, spec, replayed_gpus=set())[0].startswith(f"verification: no validator replays {H100}")
    assert unfit_reasons(on_gpu, spec, replayed_gpus={H100}) == []
    assert unfit_reasons(measured, spec, replayed_gpus=set()) == []  # the CPU is replayed by every verifier

    chain = make_chain(accounts=2, validators=1, params={"market": MARKET_PARAMS})
    market = Market(chain)
    task_id = market.submit(spec=spec, spec_hash=hashlib.sha256(spec).digest(), workers=1, rounds=ROUNDS,
                            samples_per_worker=1)
    service = new_service(tmp_path, chain, market.workers[0])
    service.preflight = on_gpu

    async def scenario():
        await service.server.start()
        try:
            await service._register()
            return await service.find_and_join()
        finally:
            await service.server.stop()

    assert not asyncio.run(scenario()) and service.unfit == {task_id}
    assert chain.deliver(chain.operators[0], pb.MsgDeclareReplayGpus(gpus=[H100])).ok
    declared = ReplayGpus.from_answer(chain.query("/market/replay_gpus"))
    assert declared.replayed() == {H100}
    assert declared.replayers[0].validator == encode_address(chain.operators[0].address)
