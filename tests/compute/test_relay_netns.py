"""End to end behind NAT: a worker in a network namespace that nothing can connect into trains a task through a
blob relay beside a worker on the host, and the task completes verified.

The worker's namespace reaches the host through a veth pair; on its side, every TCP SYN-ACK it would send is
dropped (`tc` on the veth's egress), so no connection into it can ever complete, while its own outbound
connections (to the node and the relay) work. The node (`trolly-node dev`), the relay (`trolly-verifier relay`)
and the verifier (`trolly-verifier start`) run on the host, as does a second worker serving its own blobs. The
relayed worker registers the relay (`init --relay`), serves nothing, pushes each round's checkpoints, update and
residual and its final weights; the host worker fetches its updates from the relay (and it the host worker's
from their blob service); the verifier replays every segment of both from where each is served, all pass, the
task completes with its final weights, which anyone fetches from the relay by hash. Skipped where namespaces, veth pairs or the tc filter cannot be made (not root, no `ip`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from chain_helpers import with_market_params
from dev_node import send_included, stop_process_group
from net_helpers import free_port

from trolly.chain.crypto import decode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.chain.proto import market_pb2
from trolly.compute.data import build_dataset
from trolly.compute.spec import example_spec
from trolly.wallet.keyring import Keyring
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.rpc import RpcClient
from trolly.wallet.txbuilder import send_message

pytestmark = pytest.mark.slow

BIN = pathlib.Path(sys.executable).parent
SCRIPTS = {name: BIN / name for name in ("trolly-node", "trolly-worker", "trolly-verifier")}
MARKET_PARAMS = {"min_worker_stake": 1_000_000, "min_collateral": 100_000, "verification_window": 300,
                 "sampling_delay": 1, "min_round_blocks": 2}
REWARD = 1_000_000


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}
"""127.0.0.1 and ::1 as /proc/net/tcp and tcp6 write a local address: a listener there is reachable from inside
the namespace only (the worker's metrics endpoint), never from the network."""

def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, check=check)


@contextlib.contextmanager
def unreachable_namespace():
    """A namespace joined to the host by a veth pair (host .1, namespace .2 of a /30) in which no inbound TCP
    connection can complete; yields (namespace, host address, namespace address)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("network namespaces need root and iproute2 (ip, tc)")
    tag = f"{os.getpid() % 10000}{random.randrange(100)}"
    namespace, host_end, inner_end = f"trolly-nat-{tag}", f"tnh{tag}", f"tnw{tag}"
    subnet = f"10.{random.randrange(200, 250)}.{random.randrange(256)}"
    host, inner = f"{subnet}.1", f"{subnet}.2"
    inside = ["ip", "netns", "exec", namespace]
    steps = [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", host_end, "type", "veth", "peer", "name", inner_end],
        ["ip", "link", "set", inner_end, "netns", namespace],
        ["ip", "addr", "add", f"{host}/30", "dev", host_end],
        ["ip", "link", "set", host_end, "up"],
        [*inside, "ip", "addr", "add", f"{inner}/30", "dev", inner_end],
        [*inside, "ip", "link", "set", inner_end, "up"],
        [*inside, "ip", "link", "set", "lo", "up"],
        # Egress of the namespace: SYN-ACKs (TCP flags byte at 33 of an IHL-5 packet, SYN and ACK set) go to a
        # class whose queue holds nothing; everything else to a class as fast as the link.
        [*inside, "tc", "qdisc", "add", "dev", inner_end, "root", "handle", "1:", "htb", "default", "10"],
        [*inside, "tc", "class", "add", "dev", inner_end, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"],
        [*inside, "tc", "class", "add", "dev", inner_end, "parent", "1:", "classid", "1:20", "htb", "rate", "8bit"],
        [*inside, "tc", "qdisc", "add", "dev", inner_end, "parent", "1:20", "handle", "20:", "pfifo", "limit", "0"],
        [*inside, "tc", "filter", "add", "dev", inner_end, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
         "match", "ip", "protocol", "6", "0xff", "match", "u8", "0x05", "0x0f", "at", "0",
         "match", "u8", "0x12", "0x12", "at", "33", "classid", "1:20"],
    ]
    try:
        for step in steps:
            result = run(*step, check=False)
            if result.returncode != 0:
                pytest.skip(f"cannot build the namespace ({' '.join(step[:6])}...): {result.stderr.strip()}")
        yield namespace, host, inner
    finally:
        run("ip", "netns", "del", namespace, check=False)
        run("ip", "link", "del", host_end, check=False)


def wait_until(predicate, timeout: float, what: str, processes=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process, log in processes:
            if process.poll() is not None:
                raise AssertionError(f"{what}: {log.name} exited {process.returncode}:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(Exception):
            value = predicate()
            if value:
                return value
        time.sleep(0.5)
    details = "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for _, log in processes)
    raise AssertionError(f"timed out waiting for {what}\n{details}")


def spawn(command: list[str], log: pathlib.Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})


def query(url: str, path: str):
    with RpcClient(url, timeout=10) as client:
        return client.query_json(path)


def inbound_connects(namespace: str, address: str) -> bool:
    """Whether a connection from the host to a listener inside the namespace completes."""
    port = 18_000 + random.randrange(1000)
    listener = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c",
                                 f"import socket,time;s=socket.socket();s.bind(('0.0.0.0',{port}));s.listen();"
                                 f"time.sleep(6)"], start_new_session=True)
    try:
        time.sleep(1.0)
        with socket.socket() as probe:
            probe.settimeout(2.0)
            try:
                probe.connect((address, port))
                return True
            except OSError:
                return False
    finally:
        stop_process_group(listener, 5)


def test_a_worker_with_no_inbound_route_completes_a_verified_task_through_a_relay(tmp_path):
    for script in SCRIPTS.values():
        if not script.exists():
            pytest.skip(f"console script not installed at {script}")
    with unreachable_namespace() as (namespace, host, inner):
        assert not inbound_connects(namespace, inner), "the namespace must refuse inbound connections"
        processes = []
        try:
            # The node, on the host's end of the veth.
            node_home = tmp_path / "node"
            run(str(SCRIPTS["trolly-node"]), "init", "--home", str(node_home), "--chain-id", "trolly-dev", "--dev")
            genesis_path = node_home / "config" / "genesis.json"
            genesis = json.loads(genesis_path.read_text())
            with_market_params(genesis["app_state"], **MARKET_PARAMS)
            genesis_path.write_text(json.dumps(genesis, indent=2))
            node = f"http://{host}:{free_port(host)}"
            node_log = tmp_path / "node.log"
            processes.append((spawn([str(SCRIPTS["trolly-node"]), "dev", "--home", str(node_home), "--block-time",
                                     "300ms", "--rpc-laddr", node.replace("http://", "tcp://")], node_log), node_log))
            wait_until(lambda: query(node, "/market/params"), 60, "the node", processes)

            # The relay and the verifier, on the host.
            relay = f"http://{host}:{free_port(host)}"
            relay_log = tmp_path / "relay.log"
            processes.append((spawn([str(SCRIPTS["trolly-verifier"]), "relay", "--node", node, "--home",
                                     str(tmp_path / "relay"), "--host", host, "--port", relay.rsplit(":", 1)[1],
                                     "--sweep-interval", "1"], relay_log), relay_log))
            wait_until(lambda: urllib.request.urlopen(f"{relay}/health", timeout=2).status == 200, 60, "the relay",
                       processes)
            Keyring(tmp_path / "wallet", "test", PasswordSource.fixed("unused")).recover("validator", DEV_MNEMONIC)
            verifier_log = tmp_path / "verifier.log"
            processes.append((spawn([str(SCRIPTS["trolly-verifier"]), "start", "--node", node, "--home",
                                     str(tmp_path / "verifier"), "--key", "validator", "--wallet-home",
                                     str(tmp_path / "wallet"), "--keyring-backend", "test", "--poll-interval", "0.5",
                                     "--retry-delay", "0.5", "--allow-private-blob-hosts"], verifier_log),
                              verifier_log))
            wait_until(lambda: "following" in verifier_log.read_text(), 120, "the verifier", processes)

            # The worker, in the namespace: it reaches the node and the relay, nothing reaches it.
            worker_home = tmp_path / "worker"
            in_namespace = ["ip", "netns", "exec", namespace]
            init = run(*in_namespace, str(SCRIPTS["trolly-worker"]), "init", "--home", str(worker_home), "--key",
                       "worker", "--keyring-backend", "test", "--create-key", "--node", node, "--relay", relay,
                       "--allow-private-blob-hosts", check=False)
            assert init.returncode == 0, init.stderr
            assert json.loads((worker_home / "worker.json").read_text())["relay"] == relay
            address = json.loads(next((worker_home / "keyring-test").glob("worker.key.json")).read_text())["address"]
            # The other worker, on the host, serves its blobs on the host's end of the veth.
            host_home = tmp_path / "host-worker"
            init = run(str(SCRIPTS["trolly-worker"]), "init", "--home", str(host_home), "--key", "host-worker",
                       "--keyring-backend", "test", "--create-key", "--node", node, "--blob-host", host,
                       "--allow-private-blob-hosts", check=False)
            assert init.returncode == 0, init.stderr
            host_address = json.loads(next((host_home / "keyring-test").glob("host-worker.key.json")).read_text())[
                "address"]
            requester = dev_key(0)
            for funded in (address, host_address):
                send_included(node, requester, send_message(decode_address(funded), 50_000_000))

            manifest = build_dataset("digits").manifest_hash
            document = example_spec(manifest, model={"arch": "mlp", "config": {"hidden": [16]}},
                                    dataset={"name": "digits", "manifest_hash": manifest, "urls": []},
                                    training={"rounds": 2, "inner_steps": 20, "batch_size": 16, "checkpoint_every": 5,
                                              "seed": 7, "inner_optimizer": {"name": "adamw", "lr": 0.003},
                                              "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9}},
                                    codec="int8")
            spec = json.dumps(document).encode()
            send_included(node, requester, market_pb2.MsgSubmitTask(
                spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=10 * REWARD, workers=2, rounds=2,
                reward_per_round=REWARD, collateral=2 * REWARD, join_blocks=1_000, round_blocks=400,
                samples_per_worker=4))
            task_id = max(t["id"] for t in query(node, "/market/tasks")["tasks"])

            worker_log, host_log = tmp_path / "worker.log", tmp_path / "host-worker.log"
            for prefix, home, log in ((in_namespace, worker_home, worker_log), ([], host_home, host_log)):
                processes.append((spawn([*prefix, str(SCRIPTS["trolly-worker"]), "start", "--home", str(home),
                                         "--max-tasks", "1", "--task", str(task_id), "--poll-interval", "0.3",
                                         "--no-progress", "--allow-private-blob-hosts", "--linger", "600"], log), log))
            wait_until(lambda: query(node, f"/market/task/{task_id}")["status"] != "running"
                       and query(node, f"/market/task/{task_id}")["status"] != "open", 600, "the task to end",
                       processes)

            task = query(node, f"/market/task/{task_id}")
            assert task["status"] == "completed", task
            assert task["final_weights_hash"], "the final weights were verified"
            members = {m["worker"]: m for m in task["members"]}
            assert (members[address]["relay"], members[address]["blob_url"]) == (relay, "")
            assert members[host_address]["relay"] == "" and members[host_address]["blob_url"].startswith(f"http://{host}:")
            assert all(m["paid"] > 0 and m["slashed"] == 0 for m in members.values()), members
            for round_index in range(2):
                detail = query(node, f"/market/task/{task_id}/round/{round_index}")
                assert len(detail["commitments"]) == 2
                for commitment in detail["commitments"]:
                    assert commitment["outcome"] == "passed", commitment
                    assert set(commitment["decisions"]) == {"pass"}, commitment  # its votes may be deleted by now

            # Anyone fetches the result by hash from the relay's place for the worker.
            digest = task["final_weights_hash"]
            with urllib.request.urlopen(f"{relay}/workers/{address}/blobs/{digest}", timeout=10) as response:
                assert hashlib.sha256(response.read()).hexdigest() == digest
            worker_text = worker_log.read_text()
            assert "publishing its blobs through the relay" in worker_text and "serving blobs at" not in worker_text
            listening = run(*in_namespace, "cat", "/proc/net/tcp", "/proc/net/tcp6").stdout.splitlines()
            inbound = [line for line in listening[1:]
                       if line.split()[3:4] == ["0A"] and line.split()[1].split(":")[0] not in LOOPBACK]
            assert not inbound, "the worker listens on nothing reachable (its metrics stay on loopback)"
            assert "voted PASS" in verifier_log.read_text()
            assert not inbound_connects(namespace, inner)
        finally:
            for process, _ in reversed(processes):
                stop_process_group(process)
