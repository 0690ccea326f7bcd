"""The wasm32 profile on a solo localnet (issue 37 item 1), real processes throughout: a digits MLP task whose spec
allows `wasm32`, one worker training with the kernel under wasmtime (`--kernel wasm32`, standing in for a browser
tab: the same .wasm, the same bytes) and one native torch worker. The validator's verifier replays each sampled
segment under the profile its commitment names; every one passes, both workers are paid, and the final weights
fetched from the workers are the ones the chain recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localnet_helpers import exported_env, free_base_port, localnet, task_ended, wallet_in
from trolly.compute.data import build_dataset
from trolly.compute.spec import example_spec
from trolly.compute.wasm.profile import PROFILE_ID

pytestmark = pytest.mark.slow


def wasm32_spec(path: Path) -> Path:
    document = example_spec(build_dataset("digits").manifest_hash, model={"arch": "mlp", "config": {"hidden": [32]}},
                            determinism={"threads": 1, "kernels": ["torch", "wasm32"]})
    document["dataset"]["urls"] = []  # bundled: every worker and verifier builds it
    document["training"].update(rounds=2, inner_steps=20, batch_size=16, checkpoint_every=5)
    path.write_text(json.dumps(document))
    return path


def test_a_wasm32_worker_and_a_torch_worker_are_verified_paid_and_agree_on_the_final_weights(tmp_path):
    home = tmp_path / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--workers", "2", "--slow-workers", "0", "--wasm32-workers", "1",
                  "--home", str(home), "--base-port", str(free_base_port(workers=2)), timeout=180.0)
    try:
        env = exported_env(up)
        wallet = wallet_in(env, tmp_path)

        wallet("task", "submit", str(wasm32_spec(tmp_path / "spec.json")), "--workers", "2", "--budget", "50trl",
               "--round-blocks", "60", "--from", "requester", "--yes")
        task = task_ended(env["TROLLY_NODE"])
        assert task["status"] == "completed", task
        trained = [r for r in task["round_details"] if not r["final_report"]]
        commitments = [c for r in trained for c in r["commitments"]]
        profiles = {c["worker"]: c["determinism_profile"] for c in commitments}
        assert len(profiles) == 2 and PROFILE_ID in profiles.values(), profiles
        assert any(profile.startswith("torch-") for profile in profiles.values()), profiles
        assert all(c["outcome"] == "passed" for c in commitments), [c["outcome"] for c in commitments]
        decisions = [d for c in commitments for d in c["decisions"]]  # the votes are deleted after the reveal window
        assert decisions and set(decisions) == {"pass"}  # every sampled segment, wasm32's replayed by the kernel
        assert all(member["paid"] > 0 for member in task["members"]), task["members"]

        fetched = json.loads(wallet("task", "fetch", "1", "-o", "model", "--json").stdout)
        assert fetched["final_weights_hash"] == task["final_weights_hash"]
    finally:
        localnet("down", "--home", str(home), timeout=120.0, check=False)
