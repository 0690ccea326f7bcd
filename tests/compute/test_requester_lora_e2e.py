"""A requester's own texts fine-tuned with LoRA, end to end through the console scripts against a real localnet
(solo engine, its validator's verifier and two workers, all real processes): the JSONL packed for lora-text and
private (`data pack --model lora-text`), paid for and served (`task submit --data`, which delivers the data key
to each worker as it joins and to the validator), trained by both workers, replayed and voted on by the
verifier, settled, fetched (`task fetch`: the adapters and the merged model) and evaluated (`task eval --data`);
a stranger fetching the served blobs meanwhile gets ciphertext. The README's JSONL -> LoRA commands are these.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from localnet_helpers import exported_env, free_base_port, localnet, task_ended, wallet_in
from safetensors.numpy import load_file
from requester_helpers import write_texts

from trolly.compute.blobs import AddressPolicy
from trolly.compute.data.fetch import DatasetBounds, DatasetFetcher
from trolly.compute.data.encryption import DataKeyError

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def test_own_texts_packed_private_are_fine_tuned_with_lora_by_two_workers_verified_fetched_and_evaluated(tmp_path):
    home = tmp_path / "localnet-home"
    up = localnet("up", "-d", "--engine", "solo", "--workers", "2", "--home", str(home), "--base-port",
                  str(free_base_port(workers=2)), timeout=180.0)
    submit = None
    try:
        env = exported_env(up)
        wallet = wallet_in(env, tmp_path)

        write_texts(tmp_path / "texts.jsonl", every=10)
        packed = json.loads(wallet("data", "pack", "texts.jsonl", "-o", "texts-data", "--model", "lora-text",
                                   "--private", "--json").stdout)
        assert packed["private"] and packed["context"] == 64 and packed["num_classes"] == 8

        submit = subprocess.Popen([str(BIN / "trolly-wallet"), "task", "submit", "--data", "texts-data", "--rounds",
                                   "1", "--workers", "2", "--budget", "50trl", "--from", "requester", "--yes",
                                   "--listen", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                                  start_new_session=True)
        serving = submit.stderr.readline()
        while serving and not serving.startswith("Serving the data at "):
            serving = submit.stderr.readline()
        assert serving, submit.communicate(timeout=30)
        url = serving.split()[4]

        async def fetch_as_a_stranger():
            return await DatasetFetcher(packed["manifest_hash"], [url], AddressPolicy(allow_private=True),
                                        DatasetBounds(1 << 20, 1 << 40)).in_memory()

        with pytest.raises(DataKeyError):  # the served shards are ciphertext to anyone without a sealed key
            asyncio.run(fetch_as_a_stranger())

        task = task_ended(env["TROLLY_NODE"])
        assert task["status"] == "completed", task
        assert submit.wait(timeout=60) == 0
        assert submit.stderr.read().count("Data key delivered to") >= 1  # the workers' boxes; the validator's before
        (trained,) = [r for r in task["round_details"] if not r["final_report"]]
        assert len(trained["commitments"]) == 2  # both workers trained the round
        decisions = [d for c in trained["commitments"] for d in c["decisions"]]  # the votes are deleted by now
        assert decisions and set(decisions) == {"pass"}  # the verifier replayed their segments, and passed them

        fetched = json.loads(wallet("task", "fetch", "1", "-o", "texts-model", "--json").stdout)
        assert fetched["final_weights_hash"] == task["final_weights_hash"] and fetched["arch"] == "lora-text"
        adapter = load_file(tmp_path / "texts-model" / "adapter.safetensors")
        merged = load_file(tmp_path / "texts-model" / "model.safetensors")
        assert any(abs(t).sum() > 0 for name, t in adapter.items() if name.endswith("up.weight"))  # trained from 0
        assert sum(t.size for t in merged.values()) > 20_000_000 and (adapter["head.bias"] == merged["head.bias"]).all()
        assert json.loads((tmp_path / "texts-model" / "labels.json").read_text()) == packed["labels"]
        evaluated = json.loads(wallet("task", "eval", "1", "--data", "texts-data", "-o", "json").stdout)
        assert evaluated["test_samples"] == packed["test_samples"] and 0 <= evaluated["accuracy"] <= 1
    finally:
        if submit is not None and submit.poll() is None:
            submit.kill()
        localnet("down", "--home", str(home), check=False)
