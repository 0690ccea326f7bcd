"""End to end on a real `trolly-node dev`: a requester's CSV packed (private: encrypted under its data key),
served by `trolly-wallet data serve` (a real blob server on 127.0.0.1), paid for with `task submit --data`, which
re-encrypts the pack under a key drawn for the task (committed on chain), follows the task and delivers that key
sealed to the worker once the task runs and to the dev validator once drawn to check it; each opens its own box
to the task's key (not the pack's), and a stranger fetching the served blobs gets ciphertext. Then
trained (a synthetic worker commits the round, the dev validator passes it, the worker reports final weights it
serves), `task fetch` (refused without the packed directory, which opens the table's preprocessing) writes
safetensors the safetensors library alone loads and the preprocessing beside them, and `task eval` scores them on
the held-out split (with the requester's packed directory, which keeps the key).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import nacl.signing
import numpy as np
import pytest
from click.testing import CliRunner
from dev_node import Client, dev_node, stop_process_group
from net_helpers import free_port
from safetensors.numpy import load_file

from market_helpers import commit_message, reveal_message, verdict_message
from requester_helpers import iris_like, write_csv
from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.chain.market.data_keys import data_key_hash
from trolly.chain.market.params import MarketParams
from trolly.chain.market.records import VERDICT_PASS
from trolly.chain.proto import bank_pb2, market_pb2 as pb
from trolly.compute.blobs import AddressPolicy, BlobStore
from trolly.compute.data.fetch import DatasetBounds, DatasetFetcher
from trolly.compute.checkpoints import encode_weights
from trolly.compute.data.encryption import DataKeyError, open_data_key
from trolly.compute.data.packing import open_packed, read_data_key
from trolly.compute.models import DataShape, build_model
from trolly.compute.requester.serving import ServingThread
from trolly.compute.spec import parse_spec
from trolly.wallet.cli import cli

from dev_node import BIN

pytestmark = pytest.mark.slow
TRL = 10**6


def test_pack_serve_submit_fetch_and_eval_on_a_real_node(tmp_path):
    env = {"TROLLY_WALLET_HOME": str(tmp_path / "home"), "TROLLY_KEYRING_BACKEND": "test"}

    def wallet(*args, input=None):
        return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env, catch_exceptions=False)

    assert wallet("keys", "add", "dev", "--recover", input=DEV_MNEMONIC + "\n").exit_code == 0
    packed_dir = tmp_path / "packed"
    packed = wallet("data", "pack", write_csv(tmp_path / "iris.csv", iris_like()), "-o", packed_dir, "--private",
                    "--json")
    assert packed.exit_code == 0, packed.output
    manifest_hash = json.loads(packed.stdout)["manifest_hash"]

    port = free_port()
    server = subprocess.Popen([str(BIN / "trolly-wallet"), "data", "serve", str(packed_dir), "--listen",
                               f"127.0.0.1:{port}", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**env, "PATH": str(BIN)}, start_new_session=True)
    worker_blobs = ServingThread(BlobStore(tmp_path / "worker-blobs"), "127.0.0.1", 0).start()
    submit = None
    try:
        lines = [server.stdout.readline()]
        while lines[-1] not in (b"}\n", b""):  # the JSON answer, printed before serving begins
            lines.append(server.stdout.readline())
        served = json.loads(b"".join(lines))
        assert served["url"] == f"http://127.0.0.1:{port}" and served["manifest_hash"] == manifest_hash

        async def fetch_served():
            return await DatasetFetcher(manifest_hash, [served["url"]], AddressPolicy(allow_private=True),
                                        DatasetBounds(1 << 20, 1 << 40)).in_memory()

        with pytest.raises(DataKeyError):  # a stranger (another task's worker) fetches ciphertext only
            asyncio.run(fetch_served())
        data_key = open_packed(packed_dir).key
        assert (packed_dir / "data.key").stat().st_mode & 0o777 == 0o600

        with dev_node(tmp_path / "node") as node:
            env["TROLLY_NODE"] = node
            client = Client(node)
            worker = dev_key(31)
            client.send(dev_key(0), bank_pb2.MsgSend(to=worker.address, amount=500 * TRL))
            params = MarketParams(**client.query("/market/params"))
            client.send(worker, pb.MsgRegisterWorker(stake=params.min_worker_stake, blob_url=worker_blobs.url,
                                                     hardware=pb.HardwareProfile(device="cpu", samples_per_second=100)))

            # The submit follows the private task until it ends, delivering its key: a process of its own.
            submit = subprocess.Popen([str(BIN / "trolly-wallet"), "task", "submit", "--data", str(packed_dir),
                                       "--data-url", served["url"], "--rounds", "1", "--budget", "50trl", "--from",
                                       "dev", "--yes", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env={**env, "PATH": str(BIN)}, start_new_session=True)
            deadline = time.monotonic() + 60
            while not client.query("/market/tasks")["tasks"]:
                assert time.monotonic() < deadline and submit.poll() is None, submit.communicate()
                time.sleep(0.5)
            task_id = max(t["id"] for t in client.query("/market/tasks")["tasks"])
            spec = parse_spec(client.query(f"/market/spec/{task_id}")["spec"])
            assert (spec.dataset.name, spec.dataset.input_size) == ("packed", 2)
            assert spec.dataset.manifest_hash != manifest_hash  # the task's own copy, in the served store
            task_key = read_data_key(packed_dir, spec.dataset.manifest_hash)
            assert task_key != data_key
            assert client.query(f"/market/task/{task_id}")["data_key_hash"] == data_key_hash(task_key).hex()

            model = build_model("mlp", spec.model.config, DataShape("classification", 2, 2), spec.training.seed)
            weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
            final_hash = BlobStore(tmp_path / "worker-blobs").put(encode_weights(weights))

            def opened_box(recipient) -> bytes:  # each opens its own box, with its own key
                deadline = time.monotonic() + 30
                while True:
                    try:
                        box = client.query(f"/market/data_key/{task_id}/{encode_address(recipient.address)}")
                        break
                    except Exception:  # not delivered yet: the submit looks every 2 s
                        assert time.monotonic() < deadline, f"no box for {recipient.address.hex()}"
                        time.sleep(0.5)
                return open_data_key(bytes.fromhex(box["sealed_key"]), nacl.signing.SigningKey(recipient.seed))

            client.send(worker, pb.MsgJoinTask(task_id=task_id))
            client.wait_for(task_id, lambda v: v["status"] == "running", "the start at the last join")
            assert opened_box(worker) == task_key
            client.send(worker, commit_message(task_id, 0, worker.address.hex(), steps=spec.training.inner_steps,
                                               checkpoint_every=spec.training.checkpoint_every,
                                               samples_processed=spec.training.inner_steps * spec.training.batch_size))
            client.wait_for(task_id, lambda v: v["phase"] == "verify", "sampling")
            assert opened_box(dev_key(0)) == task_key  # keyed once drawn onto the committee
            items = client.query(f"/market/verify/{encode_address(dev_key(0).address)}")["segments"]
            client.send(dev_key(0), *[verdict_message(dev_key(0), task_id, i, VERDICT_PASS) for i in items])
            client.wait_for(task_id, lambda v: v["round"] == 1 and v["phase"] == "commit", "the final report phase")
            client.send(dev_key(0), *[reveal_message(task_id, i) for i in items])
            client.send(worker, pb.MsgCommitRound(task_id=task_id, round=1, start_weights_hash=bytes.fromhex(final_hash)))
            # Where the final report is verified like a round, the dev validator passes it too.
            view = client.wait_for(task_id, lambda v: v["final_weights_hash"] or v["phase"] == "verify",
                                   "the final report's verification")
            if not view["final_weights_hash"]:
                items = client.query(f"/market/verify/{encode_address(dev_key(0).address)}")["segments"]
                client.send(dev_key(0), *[verdict_message(dev_key(0), task_id, i, VERDICT_PASS) for i in items])
                view = client.wait_for(task_id, lambda v: v["final_weights_hash"], "the verified final weights")
            assert view["final_weights_hash"] == final_hash
            stdout, stderr = submit.communicate(timeout=60)  # it returns once the task ended
            assert submit.returncode == 0 and b"Data key delivered to" in stderr, stderr

            not_private = wallet("task", "fetch", task_id, "-o", tmp_path / "refused")
            assert not_private.exit_code != 0 and not_private.stderr.startswith("Error: ")
            assert "loopback address" in not_private.stderr and "--allow-private-addresses" in not_private.stderr
            assert not (tmp_path / "refused").exists()
            without_pack = wallet("task", "fetch", task_id, "-o", tmp_path / "model", "--allow-private-addresses")
            assert without_pack.exit_code != 0 and "private data" in without_pack.stderr
            assert "--data" in without_pack.stderr and not (tmp_path / "model").exists()
            fetched = wallet("task", "fetch", task_id, "-o", tmp_path / "model", "--allow-private-addresses", "--data",
                             packed_dir, "--json")
            assert fetched.exit_code == 0, fetched.output
            assert json.loads(fetched.stdout)["files"][-1] == "preprocessing.json"
            assert (tmp_path / "model" / "preprocessing.json").read_bytes() == \
                (packed_dir / "preprocessing.json").read_bytes()
            assert json.loads(fetched.stdout)["final_weights_hash"] == final_hash
            loaded = load_file(str(tmp_path / "model" / "model.safetensors"))
            assert set(loaded) == set(weights)
            assert all(np.array_equal(loaded[name], weights[name].numpy()) for name in weights)
            assert json.loads((tmp_path / "model" / "labels.json").read_text()) == ["setosa", "virginica"]
            assert parse_spec((tmp_path / "model" / "spec.json").read_bytes()) == spec

            without_key = wallet("task", "eval", task_id, "--allow-private-addresses", "-o", "json")
            assert without_key.exit_code != 0 and "private" in without_key.stderr and "--data" in without_key.stderr
            evaluated = wallet("task", "eval", task_id, "--data", packed_dir, "--allow-private-addresses", "-o", "json")
            assert evaluated.exit_code == 0, evaluated.output
            answer = json.loads(evaluated.stdout)
            assert answer["test_samples"] == 8 and 0 <= answer["accuracy"] <= 1 and answer["loss"] > 0
            client.rpc.close()
    finally:
        worker_blobs.stop()
        stop_process_group(server)
        if submit is not None:
            stop_process_group(submit)
