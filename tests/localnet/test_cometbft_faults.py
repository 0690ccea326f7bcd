"""Faults, joins and leaves on a localnet of 4 validators on real CometBFT v0.38 processes (issue 17 items 4, 5).

Two networks, one per test class, each shared by its class's tests in order (a network costs seconds to bring
up; `make test` distributes tests by scope, so a class's tests run in one worker, in order):

- `TestDuringATask`: 4 validators (40/30/20/10 % of the power), 2 workers and transfers sent all along; each
  test runs a short training task of its own (the demo's code, `localnet.demo.Demo`, in a thread of this
  process; it checks its settlement against the balances on chain) while it breaks something: a fifth node
  joins, stakes, signs, votes and leaves; one validator is SIGKILLed mid-task; two holding more than a third
  are; two verifiers turn dishonest. Last, every node's blocks and app hashes are compared over more than a
  thousand blocks of that mixed load (each app runs with its own PYTHONHASHSEED).
- `TestCrashes`: 4 validators and no workers: an app that dies between FinalizeBlock and Commit is replayed by
  CometBFT's handshake; a validator whose key runs on two nodes is slashed and jailed for double-signing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.localnet.home_layout import LocalnetConfig
from trolly.localnet.network import Localnet
from trolly.localnet.services import app_hash_seed
from trolly.localnet.supervisor import ServiceSpec
from trolly.wallet.rpc import AsyncRpcClient, RpcClient

from chain_helpers import with_market_params
from localnet_helpers import cometbft_missing, free_base_port, query, recorded_pids, wait_until
from whole_task import whole_task

pytestmark = pytest.mark.slow


if cometbft_missing():
    pytest.skip(f"needs CometBFT v0.38 (make setup installs it where Go exists): {cometbft_missing()}",
                allow_module_level=True)

WALLET = str(Path(sys.executable).parent / "trolly-wallet")

BLOCK_TIME = "150ms"
"""Short, so that a thousand blocks pass while the task runs; the task's deadlines are counted in blocks and
lengthened to match (`PATIENT_MARKET`)."""

PATIENT_MARKET = {"verification_window": 400, "reveal_window": 100}
"""Market parameters written into the task network's genesis: windows long enough, in blocks of BLOCK_TIME on a
loaded machine, for a verifier's first replay and for reveals; a segment is still decided as soon as two thirds
of its committee voted, so a long window costs nothing when verifiers answer."""

TASK_ROUNDS = 3
TEST_TIMEOUT = 1200
"""Seconds a test of the task network may take (pytest-timeout's default is shorter than a task on a loaded
machine)."""
TASK_TIMEOUT = 900.0
LOAD_INDEX = 300
"""Dev-mnemonic index of the account the transfer load is sent from (funded by the fixture)."""
JOIN_STAKE = "10trl"


# ------------------------------------------------------------------------------------------------- helpers


def chain_headers(rpc: str, low: int, high: int) -> dict[int, tuple[str, str]]:
    """height -> (block hash, app hash in its header) for heights low..high, read 20 at a time."""
    headers = {}
    with RpcClient(rpc, timeout=10.0) as client:
        for top in range(high, low - 1, -20):
            result = client.call("blockchain", minHeight=str(max(low, top - 19)), maxHeight=str(top))
            for meta in result["block_metas"]:
                headers[int(meta["header"]["height"])] = (meta["block_id"]["hash"], meta["header"]["app_hash"])
    return headers


def assert_same_chain(net: Localnet, nodes: list[int], low: int, high: int) -> None:
    """Every node in `nodes` holds the same blocks and app hashes at heights low..high (no fork)."""
    reference = chain_headers(net.config.rpc_url(nodes[0]), low, high)
    assert sorted(reference) == list(range(low, high + 1))
    for index in nodes[1:]:
        other = chain_headers(net.config.rpc_url(index), low, high)
        differing = [h for h in reference if other.get(h) != reference[h]]
        assert not differing, f"validator-{index} differs from validator-{nodes[0]} at heights {differing[:10]}"


def heights(net: Localnet, nodes: list[int]) -> list[int]:
    return [net.height(i) for i in nodes]


def operator(index: int) -> str:
    return encode_address(dev_key(index).address)


def consensus_address(net: Localnet, index: int) -> str:
    """The CometBFT validator address (upper-case hex) of node `index`'s consensus key."""
    document = json.loads((net.layout.node_home(index) / "config" / "priv_validator_key.json").read_text())
    return document["address"].upper()


def cometbft_validators(net: Localnet, index: int = 0) -> dict[str, int]:
    """CometBFT's validator set as node `index` sees it now: address -> voting power."""
    with RpcClient(net.config.rpc_url(index), timeout=5.0) as client:
        result = client.call("validators", per_page="100")
    return {v["address"].upper(): int(v["voting_power"]) for v in result["validators"]}


def wallet(net: Localnet, *args: str, node: int = 0) -> dict:
    """`trolly-wallet ARGS --node <node's RPC> ...` with the localnet's test keyring; its JSON output."""
    done = subprocess.run(
        [WALLET, *args, "--home", str(net.layout.wallet_home), "--keyring-backend", "test",
         "--node", net.config.rpc_url(node), "--output", "json"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"trolly-wallet {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def task_view(net: Localnet, node: int = 0) -> dict:
    return whole_task(functools.partial(query, net.config.rpc_url(node)), 1)


def verdicts(view: dict) -> list[dict]:
    """Every verdict on chain of the task's rounds, each with its round and the commitment's outcome."""
    return [dict(v, round=r["round"], outcome=c["outcome"], worker=c["worker"])
            for r in view.get("round_details", []) if not r.get("final_report")
            for c in r["commitments"] for v in c["verdicts"]]


def passed_rounds(view: dict) -> set[int]:
    return {r["round"] for r in view.get("round_details", []) if not r.get("final_report")
            and r["commitments"] and all(c["outcome"] == "passed" for c in r["commitments"])}


def verifier_spec(net: Localnet, index: int, *switches: str) -> ServiceSpec:
    """Verifier `index`'s service, as the localnet runs it, plus test switches (for node 4: the same command)."""
    config = net.config
    if index < config.validators:
        spec = net.service_specs(config)[f"verifier-{index}"]
        return dataclasses.replace(spec, argv=spec.argv + switches)
    template = net.service_specs(config)["verifier-0"].argv
    own = {str(net.layout.verifier_home(0)): str(net.layout.verifier_home(index)),
           config.rpc_url(0): config.rpc_url(index), "validator-0": f"validator-{index}",
           str(config.relay_port(0)): str(config.relay_port(index))}  # its own home, node, key and relay port
    argv = [own.get(a, a) for a in template]
    return ServiceSpec(f"verifier-{index}", tuple(argv) + switches)


def patch_genesis_market(net: Localnet, **market) -> None:
    """Before the first start: the same market parameters changed in every node's genesis (and its unbonding
    lengthened to outlast them, as genesis requires)."""
    for index in range(net.config.nodes):
        path = net.layout.node_home(index) / "config" / "genesis.json"
        genesis = json.loads(path.read_text())
        with_market_params(genesis["app_state"], **market)
        path.write_text(json.dumps(genesis, indent=2))


class Background(threading.Thread):
    """Runs `coroutine_function()` in its own event loop; `result` or `error` afterwards."""

    def __init__(self, coroutine_function) -> None:
        super().__init__(daemon=True)
        self.coroutine_function = coroutine_function
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = asyncio.run(self.coroutine_function())
        except BaseException as exc:  # reported by the test that waits for it
            self.error = exc


class TransferLoad(threading.Thread):
    """Signed transfers from the load account, one at a time, each waited for in a block, until stopped.
    A transfer that fails (no blocks while two validators are down) is counted and the next one tried."""

    def __init__(self, rpc: str) -> None:
        super().__init__(daemon=True)
        self.rpc = rpc
        self.stop = threading.Event()
        self.included = 0
        self.failed = 0

    def run(self) -> None:
        asyncio.run(self._send_until_stopped())

    async def _send_until_stopped(self) -> None:
        from trolly.wallet.sender import TxSender
        from trolly.wallet.txbuilder import send_message

        key = dev_key(LOAD_INDEX)
        signer = encode_address(key.address)
        recipients = [dev_key(LOAD_INDEX + 1 + i).address for i in range(5)]
        async with AsyncRpcClient(self.rpc, timeout=10.0) as client:
            sender = TxSender(client)
            while not self.stop.is_set():
                try:
                    plan = await sender.plan(signer, [send_message(recipients[self.included % 5], 1 + self.included)])
                    await sender.send(key, plan, timeout=15.0)
                    self.included += 1
                except Exception:  # the node may be down or stalled: try again
                    self.failed += 1
                    await asyncio.sleep(1.0)


# ------------------------------------------------------------------------------------------- the task network


@dataclasses.dataclass
class TaskNet:
    net: Localnet
    load: TransferLoad
    logs: Path


def _patient_demo(net: Localnet, log_file):
    """The demo's task, submitted with round deadlines counted for short blocks, followed to its settlement
    (the demo checks the settlement against the balances on chain and raises if they disagree)."""
    from rich.console import Console

    from trolly.localnet.demo import Demo, DemoOptions
    from trolly.wallet.requester import TaskOrder, sending_with, submit_task

    class PatientDemo(Demo):
        async def submit(self, client, spec: bytes, data_key_hash: bytes = b"") -> int:
            order = TaskOrder(spec, self.options.budget, self.config.workers, join_blocks=600, round_blocks=600,
                              data_key_hash=data_key_hash)
            submitted = await submit_task(client, order, sending_with(client, self.keyring.signer("requester")))
            return submitted.task_id

    console = Console(file=log_file, width=200, force_terminal=False)
    demo = PatientDemo(net, net.config, DemoOptions(rounds=TASK_ROUNDS, timeout=TASK_TIMEOUT), console)
    return lambda: demo.run(time.monotonic())


class Task:
    """A training task run in a thread of this process while a test breaks things around it."""

    def __init__(self, task_net: TaskNet, name: str) -> None:
        self.net = task_net.net
        self.id = len(query(self.net.config.rpc_url(0), "/market/tasks")["tasks"]) + 1
        self.log = open(task_net.logs / f"task-{self.id}-{name}.log", "w")
        self.thread = Background(_patient_demo(self.net, self.log))
        self.thread.start()

    def view(self, node: int = 0) -> dict:
        return whole_task(functools.partial(query, self.net.config.rpc_url(node)), self.id)

    def wait(self, condition, what: str, node: int = 0):
        """Poll the task's view until `condition(view)` is truthy; return that."""
        return wait_until(lambda: condition(self.view(node)), TASK_TIMEOUT, f"task {self.id}: {what}", interval=1.0)

    def wait_running(self) -> dict:
        return self.wait(lambda v: v["status"] == "running" and v.get("round_details") and v, "to start")

    def settled(self) -> dict:
        """Wait for the demo's end: its summary, after its settlement checks against the chain passed."""
        self.thread.join(timeout=TASK_TIMEOUT + 60)
        self.log.close()
        assert not self.thread.is_alive(), f"task {self.id} did not settle in time"
        assert self.thread.error is None, f"task {self.id}: {self.thread.error!r}"
        summary = self.thread.result
        assert summary["task_id"] == self.id
        assert summary["status"] == "completed" and summary["rounds"] == TASK_ROUNDS, summary
        return summary


def _fund(net: Localnet, addresses: list[str], amount: int) -> None:
    """One transfer of `amount` from the requester to each address, in one transaction."""
    from trolly.wallet.keyring import Keyring
    from trolly.wallet.sender import TxSender
    from trolly.wallet.txbuilder import parse_address, send_message

    keyring = Keyring(net.layout.wallet_home, backend="test")

    async def send() -> None:
        async with AsyncRpcClient(net.config.rpc_url(0), timeout=10.0) as client:
            sender = TxSender(client)
            plan = await sender.plan(keyring.get("requester").address,
                                     [send_message(parse_address(a), amount) for a in addresses])
            await sender.send(keyring.signer("requester"), plan, timeout=60.0)

    asyncio.run(send())


@pytest.fixture(scope="class")
def task_net(tmp_path_factory):
    home = tmp_path_factory.mktemp("cometbft-faults-task") / "net"
    config = LocalnetConfig(validators=4, workers=2, slow_workers=0, block_time=BLOCK_TIME,
                            base_port=free_base_port(validators=5, workers=2))
    net = Localnet(home, config)
    net.ensure_initialized()
    patch_genesis_market(net, **PATIENT_MARKET)
    load = TransferLoad(config.rpc_url(0))
    try:
        net.up(timeout=120)
        _fund(net, [operator(LOAD_INDEX), operator(4)], 100_000_000_000)  # the load account; validator-4 to be
        load.start()
        yield TaskNet(net, load, home.parent)
    finally:
        load.stop.set()
        net.down()
        load.join(timeout=30)


def all_paid(view: dict) -> None:
    """Every member finished the task unslashed and was paid for every round."""
    assert all(m["status"] == "finished" and m["slashed"] == 0 and m["paid"] > 0 for m in view["members"]), view["members"]
    assert passed_rounds(view) == set(range(TASK_ROUNDS))


class TestDuringATask:
    @pytest.mark.timeout(TEST_TIMEOUT)
    def test_a_fifth_node_syncs_from_genesis_stakes_signs_votes_then_unbonds_and_leaves_the_set(self, task_net):
        """It stakes as much as validator-3 (10 TRL of 110): while verifier-1 (30) is stopped, the 70 left
        without it are less than two thirds, so no segment is decided without its vote."""
        net = task_net.net
        name = net.add_node()
        index = net.config.nodes - 1
        assert name == f"validator-{index}" == "validator-4"
        net.start(name)
        # Block sync from genesis: it reaches the others' height, and switches to consensus.
        wait_until(lambda: net.height(index) >= net.height(0) - 1, 120, "the fifth node to catch up")
        assert "switch to consensus" in net.supervisor.log_file(f"cometbft-{index}").read_text().lower()

        # It stakes with the wallet's CLI, against its own RPC, with its own consensus key.
        key_file = net.layout.node_home(index) / "config" / "priv_validator_key.json"
        outcome = wallet(net, "tx", "stake", "create-validator", "--stake", JOIN_STAKE, "--moniker", name,
                         "--consensus-key-file", str(key_file), "--from", name, "--yes", node=index)
        assert outcome["code"] == 0, outcome
        address = consensus_address(net, index)
        wait_until(lambda: cometbft_validators(net, index).get(address) == 10, 60, "the fifth validator in /validators")
        assert len(cometbft_validators(net, 0)) == 5

        # It signs blocks: its address among a commit's signatures.
        def signed() -> bool:
            height = net.height(index) - 1
            with RpcClient(net.config.rpc_url(index), timeout=5.0) as client:
                commit = client.call("commit", height=str(height))["signed_header"]["commit"]
            return any(s["validator_address"].upper() == address and s["signature"] for s in commit["signatures"])
        wait_until(signed, 60, "a commit signed by the fifth validator")

        # Its verifier votes on a task's verifications (committees are drawn from every validator by stake).
        net.kill("verifier-1")
        net.supervisor.start(verifier_spec(net, index))
        task = Task(task_net, "join")
        task.settled()
        mine = operator(index)
        view = task.view()
        all_paid(view)
        voted = [v for v in verdicts(view) if v["validator"] == mine]
        assert voted and {v["verdict"] for v in voted} == {"pass"}
        assert {v["round"] for v in voted} == set(range(TASK_ROUNDS))
        net.start("verifier-1")

        # It unbonds (its verifier stopped first: one signer per key) and drops out of CometBFT's set.
        net.supervisor.kill(f"verifier-{index}")  # not one of the node's services: started by hand above
        outcome = wallet(net, "tx", "stake", "unbond", JOIN_STAKE, "--from", name, "--yes", node=index)
        assert outcome["code"] == 0, outcome
        wait_until(lambda: address not in cometbft_validators(net, 0), 60, "the fifth validator to leave the set")
        assert query(net.config.rpc_url(0), f"/validator/{mine}")["power"] == 0
        wait_until(lambda: address not in cometbft_validators(net, index), 30, "the fifth node to see itself leave")
        assert len(cometbft_validators(net, index)) == 4
        net.kill(name)  # a full node no longer needed: the machine has two cores

    @pytest.mark.timeout(TEST_TIMEOUT)
    def test_one_validator_killed_mid_task_the_others_go_on_the_task_settles_and_it_catches_up(self, task_net):
        net = task_net.net
        task = Task(task_net, "one-down")
        task.wait_running()
        assert set(net.kill("validator-1")) == {"app-1", "cometbft-1", "verifier-1"}
        # 70 % of the power is left: blocks go on, and the task completes and settles without validator-1.
        height = net.height(0)
        net.wait_for_height(height + 10, nodes=[0, 2, 3], timeout=60)
        task.settled()
        all_paid(task.view())
        assert not net.supervisor.is_running("cometbft-1")

        net.start("validator-1")
        target = net.height(0) + 3
        net.wait_for_height(target, nodes=[0, 1, 2, 3], timeout=120)
        assert net.app_hash_at(1, target - 1) == net.app_hash_at(0, target - 1)
        assert_same_chain(net, [0, 1, 2, 3], max(1, height - 5), target - 1)

    @pytest.mark.timeout(TEST_TIMEOUT)
    def test_two_validators_holding_more_than_a_third_killed_stop_blocks_without_a_fork_and_the_chain_resumes(
            self, task_net):
        net = task_net.net
        task = Task(task_net, "two-down")
        task.wait_running()
        net.kill("validator-1")
        net.kill("validator-2")
        # 50 % left: no two thirds, no block. One already voted on may still be committed.
        stopped = max(heights(net, [0, 3]))
        time.sleep(6)
        stalled = heights(net, [0, 3])
        assert max(stalled) <= stopped + 1, f"blocks went on with half the power: {stopped} -> {stalled}"
        time.sleep(4)
        assert heights(net, [0, 3]) == stalled
        assert task.view()["status"] == "running"
        assert_same_chain(net, [0, 3], 1, min(stalled))

        net.start("validator-1")
        net.start("validator-2")
        target = max(stalled) + 5
        net.wait_for_height(target, nodes=[0, 1, 2, 3], timeout=120)
        assert_same_chain(net, [0, 1, 2, 3], max(1, min(stalled) - 20), target)
        # The task still completes (and the nodes' equal app hashes cover it).
        task.settled()
        all_paid(task.view())

    @pytest.mark.timeout(TEST_TIMEOUT)
    def test_dishonest_verifiers_are_outvoted_the_honest_workers_are_paid_and_their_votes_are_on_chain(self, task_net):
        """validator-3 (10 %) votes FAIL on honest work; validator-2 (20 %) never votes: the honest 70 % decide."""
        net = task_net.net
        for index, switch in ((2, "--test-switch-never-vote"), (3, "--test-switch-vote-fail")):
            net.kill(f"verifier-{index}")
            following = len(log_lines(net, f"verifier-{index}", "following http"))
            net.supervisor.start(verifier_spec(net, index, switch))
            wait_until(lambda: len(log_lines(net, f"verifier-{index}", "following http")) > following, 120,
                       f"verifier-{index} to follow the chain with {switch}")
        liar, silent = operator(3), operator(2)
        task = Task(task_net, "dishonest")
        # The lies go on chain before the honest votes decide (the liar, ready before the task began, does not
        # replay: it answers first; a verdict on an already decided segment would be refused).
        task.wait(lambda v: [x for x in verdicts(v) if x["validator"] == liar], "validator-3's FAIL votes")
        task.settled()
        view = task.view()
        all_paid(view)  # the honest workers are paid for every round, nobody slashed
        cast = verdicts(view)
        assert {x["verdict"] for x in cast if x["validator"] == liar} == {"fail"}
        assert not [x for x in cast if x["validator"] == silent]
        assert {x["verdict"] for x in cast if x["validator"] in (operator(0), operator(1))} == {"pass"}
        # The same votes, queried from every node: on chain for all. A node may be a block behind another when
        # asked (queries answer at each node's latest height), so ask until all four answer from the same state.
        def alike():
            answers = [verdicts(task.view(node=i)) for i in range(4)]
            return answers[0] if all(answer == answers[0] for answer in answers) else None
        everywhere = wait_until(alike, 60, "every node to show the same verdicts")
        assert {(x["validator"], x["verdict"]) for x in everywhere} == {(x["validator"], x["verdict"]) for x in cast}
        for index in (2, 3):
            net.kill(f"verifier-{index}")
            net.start(f"verifier-{index}")

    @pytest.mark.timeout(TEST_TIMEOUT)
    def test_four_nodes_with_different_hash_seeds_agree_on_every_app_hash_over_a_thousand_blocks(self, task_net):
        net = task_net.net
        pids = recorded_pids(net.layout.home)
        seeds = []
        for index in range(4):
            environ = Path(f"/proc/{pids[f'app-{index}']}/environ").read_bytes().split(b"\0")
            seeds.append([e for e in environ if e.startswith(b"PYTHONHASHSEED=")])
        assert seeds == [[f"PYTHONHASHSEED={app_hash_seed(i)}".encode()] for i in range(4)]
        assert len({app_hash_seed(i) for i in range(4)}) == 4

        net.wait_for_height(1002, nodes=[0, 1, 2, 3], timeout=900)
        task_net.load.stop.set()
        top = min(heights(net, [0, 1, 2, 3]))
        assert_same_chain(net, [0, 1, 2, 3], 1, top)
        # The load was mixed: transfers all along, staking (the fifth validator's), tasks' commits and verdicts.
        assert task_net.load.included >= 100
        tasks = query(net.config.rpc_url(0), "/market/tasks")["tasks"]
        assert len(tasks) >= 4, "the tasks and the staking come from the class's earlier tests: run the whole class"
        assert all(t["status"] == "completed" for t in tasks)
        assert query(net.config.rpc_url(0), f"/validator/{operator(4)}")["stake"] == 0


# ---------------------------------------------------------------------------------------- crashes, double-signs


@pytest.fixture(scope="class")
def quiet_net(tmp_path_factory):
    home = tmp_path_factory.mktemp("cometbft-faults-quiet") / "net"
    net = Localnet(home, LocalnetConfig(validators=4, workers=0, slow_workers=0, block_time="200ms",
                                        base_port=free_base_port(validators=5, workers=0)))
    try:
        net.up(timeout=120)
        yield net
    finally:
        net.down()


def log_lines(net: Localnet, service: str, text: str) -> list[str]:
    return [line for line in net.supervisor.log_file(service).read_text().splitlines() if text in line]


class TestCrashes:
    def test_an_app_killed_between_finalize_block_and_commit_is_replayed_by_the_handshake_and_rejoins(self, quiet_net):
        """The app of validator-3 runs with the test switch TROLLY_TEST_EXIT_BEFORE_COMMIT_HEIGHT=H: it answers
        FinalizeBlock of block H, then exits at its Commit before writing anything (abci_app/crash_switch.py).
        CometBFT has stored block H by then, but not the state after it. Started again without the switch, the
        handshake finds the app at H - 1 and CometBFT's store at H, replays block H to the app, and the node goes
        on with the same app hashes as the others."""
        from trolly.abci_app.crash_switch import ENVIRONMENT_VARIABLE, EXIT_CODE

        net = quiet_net
        specs = net.service_specs(net.config)
        net.kill("validator-3")
        crash_height = net.height(0) + 15
        app = dataclasses.replace(specs["app-3"], env={**specs["app-3"].env, ENVIRONMENT_VARIABLE: str(crash_height)})
        process = net.supervisor.start(app)
        net.supervisor.wait_ready(app, 60)
        net.supervisor.start(specs["cometbft-3"])
        assert process.wait(timeout=120) == EXIT_CODE
        assert log_lines(net, "app-3", f"exiting after FinalizeBlock of height {crash_height}, before its Commit")
        net.kill("validator-3")  # its CometBFT, if it did not stop on losing its app
        net.wait_for_height(crash_height + 2, nodes=[0, 1, 2], timeout=60)  # the others go on

        net.start("validator-3")
        target = net.height(0) + 3
        net.wait_for_height(target, timeout=120)
        replays = log_lines(net, "cometbft-3", "ABCI Replay Blocks")
        assert replays and all(f"{key}={value}" in replays[-1] for key, value in
                               (("appHeight", crash_height - 1), ("storeHeight", crash_height),
                                ("stateHeight", crash_height - 1))), replays
        assert log_lines(net, "cometbft-3", "Replay last block using real app")
        assert_same_chain(net, [0, 1, 2, 3], crash_height - 2, target)
        assert net.app_hash_at(3, crash_height) == net.app_hash_at(0, crash_height)

    def test_a_validator_whose_key_signs_on_two_nodes_is_slashed_and_jailed_for_the_duplicate_votes(self, quiet_net):
        """validator-3's consensus key is copied to a fifth node (`add_node(key_from=...)`), each with its own
        double-sign guard file, so both sign. Their votes conflict whenever the two twins see different things
        at one height and round: each makes its own proposal when validator-3 proposes (the two blocks differ
        at least in time), or one prevotes a block while the other, later, prevotes nil. CometBFT's evidence
        reactor turns two conflicting signed votes into DuplicateVoteEvidence, which a later block carries and
        FinalizeBlock hands to the app as misbehavior: the app slashes validator-3 and jails it (power 0), and
        CometBFT drops it from the set.

        Conditions: the twin must reach consensus at the network's height (block sync from genesis first), and
        the two must then disagree once: validator-3 holds 10 % of the power, so it proposes about one round in
        ten, and short blocks give many rounds. If no evidence comes within a window, the twin is restarted (it
        then joins consensus late, which makes conflicting votes likelier); the test fails only after four such
        windows."""
        net = quiet_net
        target_operator = operator(3)
        target_address = consensus_address(net, 3)
        before = query(net.config.rpc_url(0), f"/validator/{target_operator}")
        assert not before["jailed"] and before["power"] == 10
        twin = net.add_node(key_from="validator-3")
        index = net.config.nodes - 1
        assert consensus_address(net, index) == target_address
        net.start(twin)
        assert any("holds the same consensus key as validator-3" in warning for warning in net.warnings)

        def jailed():
            return query(net.config.rpc_url(0), f"/validator/{target_operator}")["jailed"]
        for attempt in range(4):
            try:
                wait_until(jailed, 90, "validator-3 to be jailed for double-signing")
                break
            except AssertionError:
                if attempt == 3:
                    raise
                net.kill(twin)
                net.start(twin)
        net.kill(twin)
        after = query(net.config.rpc_url(0), f"/validator/{target_operator}")
        assert after["jailed"] and after["power"] == 0
        assert 0 < after["stake"] < before["stake"]
        wait_until(lambda: target_address not in cometbft_validators(net, 0), 30, "validator-3 to leave the set")
        assert len(cometbft_validators(net, 0)) == 3
        # The evidence is in a block, for all to see.
        top = net.height(0)
        with RpcClient(net.config.rpc_url(0), timeout=10.0) as client:
            evidence = [e for h in range(max(1, top - 600), top + 1)
                        for e in client.call("block", height=str(h))["block"]["evidence"]["evidence"] or []]
        assert any(e["type"] == "tendermint/DuplicateVoteEvidence" and
                   e["value"]["vote_a"]["validator_address"].upper() == target_address for e in evidence)
        # The three others go on.
        net.wait_for_height(top + 3, nodes=[0, 1, 2], timeout=60)
