"""Fast tests of the localnet's pieces: its configuration and ports, the files it generates (checked against
CometBFT v0.38's formats), the supervisor's process handling (with tiny `sleep` processes), where each app
listens and its engine dials it, the progress line of the demo, and the help of every command; one slow test
kills a real app and starts it again on its socket."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import nacl.signing
import pytest
from click.testing import CliRunner

from trolly.abci_app.cometbft import CometbftBinary, CometbftMissing, find_cometbft
from trolly.chain.crypto import encode_address
from trolly.chain.hd import dev_key
from trolly.localnet.cli import main
from trolly.localnet.engine_choice import choose_engine
from trolly.localnet.network import Localnet
from trolly.localnet.demo import progress_line
from trolly.localnet.home_layout import (
    ACCOUNT_BALANCE,
    REQUESTER_INDEX,
    VALIDATOR_STAKE,
    VERIFICATION_WINDOW,
    WORKER_INDEX_BASE,
    Layout,
    LocalnetConfig,
    LocalnetError,
    init_localnet,
    key_names,
)
from trolly.localnet.supervisor import ServiceError, ServiceSpec, Supervisor
from trolly.wallet.keyring import Keyring
from trolly.wallet.market_views import TaskView

from localnet_helpers import process_family, survivors
from market_view_helpers import address, commitment_answer, member_answer, round_answer, task_answer, vote_answer

# ------------------------------------------------------------------------------------------ configuration


def test_ports_are_distinct_within_the_largest_localnet():
    config = LocalnetConfig(engine="cometbft", validators=8, workers=16, base_port=20_000)
    ports = config.ports()
    # per node: RPC, ABCI, p2p, relay and three metrics endpoints; per worker: blobs and metrics
    assert len(ports) == len(set(ports)) == 8 * 7 + 2 + 16 * 2  # + the demo's data server and the console
    assert min(ports) == 20_000 and max(ports) == 20_135


def test_localnets_200_ports_apart_never_share_a_port():
    first = LocalnetConfig(engine="cometbft", validators=8, workers=16, base_port=20_000)
    second = LocalnetConfig(engine="cometbft", validators=8, workers=16, base_port=20_200)
    assert not set(first.ports()) & set(second.ports())


@pytest.mark.parametrize(
    "config, complaint",
    [
        (LocalnetConfig(engine="solo", validators=3), "solo engine runs exactly one validator"),
        (LocalnetConfig(engine="cometbft", validators=9), "1 to 8 nodes"),
        (LocalnetConfig(workers=2, slow_workers=3), "at most all of them slow"),
        (LocalnetConfig(base_port=65_500), "outside 1024..65535"),
        (LocalnetConfig(engine="tendermint"), "unknown engine"),
    ],
)
def test_init_refuses_a_configuration_that_cannot_run_and_writes_nothing(tmp_path, config, complaint):
    with pytest.raises(LocalnetError, match=complaint):
        init_localnet(Layout(tmp_path / "net"), config)
    assert not (tmp_path / "net").exists()


def test_init_refuses_an_existing_localnet(tmp_path):
    layout = Layout(tmp_path)
    init_localnet(layout, LocalnetConfig(workers=1))
    with pytest.raises(LocalnetError, match="already holds a localnet"):
        init_localnet(layout, LocalnetConfig(workers=1))


def test_the_saved_configuration_loads_back_equal(tmp_path):
    config = LocalnetConfig(workers=2, slow_workers=0, base_port=23_000, block_time="250ms", cheat="skipped_steps")
    layout = Layout(tmp_path)
    init_localnet(layout, config)
    assert layout.load() == config


def test_keyring_and_genesis_fund_every_localnet_key(tmp_path):
    config = LocalnetConfig(engine="solo", validators=1, workers=2)
    layout = Layout(tmp_path)
    init_localnet(layout, config)
    keyring = Keyring(layout.wallet_home, backend="test")
    assert sorted(key_names(config)) == sorted(info.name for info in keyring.list())
    assert keyring.get("requester").address == encode_address(dev_key(REQUESTER_INDEX).address)
    assert keyring.get("worker-1").address == encode_address(dev_key(WORKER_INDEX_BASE + 1).address)
    genesis = json.loads((layout.node_home(0) / "config" / "genesis.json").read_text())
    accounts = {a["address"]: int(a["balance"]) for a in genesis["app_state"]["accounts"]}
    assert accounts == {keyring.get(name).address: ACCOUNT_BALANCE for name in key_names(config)}
    public_keys = {a["address"]: a["pub_key"] for a in genesis["app_state"]["accounts"]}
    assert public_keys == {encode_address(dev_key(index).address): base64.b64encode(dev_key(index).pubkey).decode()
                           for index in key_names(config).values()}  # a private task's key reaches anyone
    (bonded,) = genesis["app_state"]["validators"]
    assert bonded["operator"] == keyring.get("validator-0").address and int(bonded["stake"]) == VALIDATOR_STAKE
    # The localnet lengthens the market's verification window (a verifier's first replay is slow).
    assert genesis["app_state"]["params"]["market"]["verification_window"] == VERIFICATION_WINDOW


# ------------------------------------------------------------------- CometBFT v0.38 homes (--validators 3)

VALIDATORS = 3
BASE = 24_000


@pytest.fixture(scope="module")
def cometbft_net(tmp_path_factory):
    layout = Layout(tmp_path_factory.mktemp("cometbft") / "net")
    config = LocalnetConfig(engine="cometbft", validators=VALIDATORS, workers=2, base_port=BASE, block_time="700ms")
    init_localnet(layout, config)
    return layout, config


def _home(layout, index) -> Path:
    return layout.node_home(index) / "config"


def _pubkey_of_private(value: str) -> bytes:
    """CometBFT's ed25519 private key JSON value: base64 of the 64-byte Go key, seed || public key."""
    raw = base64.b64decode(value, validate=True)
    assert len(raw) == 64
    public = bytes(nacl.signing.SigningKey(raw[:32]).verify_key)
    assert raw[32:] == public, "the public half must be the seed's public key"
    return public


def test_every_node_has_the_same_genesis_naming_all_validators(cometbft_net):
    layout, config = cometbft_net
    texts = {(_home(layout, i) / "genesis.json").read_bytes() for i in range(VALIDATORS)}
    assert len(texts) == 1, "genesis.json must be byte-identical on every node"
    genesis = json.loads(texts.pop())
    # types/genesis.go: GenesisDoc fields, int64 as JSON strings, ValidateAndComplete's rules.
    assert set(genesis) == {"genesis_time", "chain_id", "initial_height", "consensus_params", "validators",
                            "app_hash", "app_state"}
    assert 0 < len(genesis["chain_id"]) <= 50 and genesis["chain_id"] == config.chain_id
    assert genesis["initial_height"] == "1"
    assert genesis["genesis_time"].endswith("Z") and "T" in genesis["genesis_time"]
    assert genesis["app_hash"] == ""
    assert genesis["consensus_params"]["block"]["max_bytes"].isdigit()
    assert genesis["consensus_params"]["validator"]["pub_key_types"] == ["ed25519"]
    validators = genesis["validators"]
    assert len(validators) == VALIDATORS
    for entry in validators:
        assert set(entry) == {"address", "pub_key", "power", "name"}
        pubkey = base64.b64decode(entry["pub_key"]["value"])
        assert entry["pub_key"]["type"] == "tendermint/PubKeyEd25519" and len(pubkey) == 32
        assert entry["address"] == hashlib.sha256(pubkey).digest()[:20].hex().upper()
        assert isinstance(entry["power"], str) and int(entry["power"]) > 0
    # The app's staking genesis bonds the same keys.
    app_keys = {v["pub_key"] for v in genesis["app_state"]["validators"]}
    assert app_keys == {v["pub_key"]["value"] for v in validators}
    # Sampling waits for vote extensions, which CometBFT is told to carry from height 1.
    assert genesis["app_state"]["params"]["market"]["seed_from_extensions"] == 1
    assert genesis["consensus_params"]["abci"]["vote_extensions_enable_height"] == "1"


def test_each_validator_key_file_is_in_the_genesis_and_well_formed(cometbft_net):
    layout, _ = cometbft_net
    genesis = json.loads((_home(layout, 0) / "genesis.json").read_text())
    in_genesis = [v["pub_key"]["value"] for v in genesis["validators"]]
    for i in range(VALIDATORS):
        path = _home(layout, i) / "priv_validator_key.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        key = json.loads(path.read_text())  # privval/file.go FilePVKey
        assert set(key) == {"address", "pub_key", "priv_key"}
        assert key["pub_key"]["type"] == "tendermint/PubKeyEd25519"
        assert key["priv_key"]["type"] == "tendermint/PrivKeyEd25519"
        public = _pubkey_of_private(key["priv_key"]["value"])
        assert base64.b64encode(public).decode() == key["pub_key"]["value"] == in_genesis[i]
        assert key["address"] == hashlib.sha256(public).digest()[:20].hex().upper()
        state = json.loads((layout.node_home(i) / "data" / "priv_validator_state.json").read_text())
        assert state == {"height": "0", "round": 0, "step": 0}  # FilePVLastSignState: int64 as a string


def _node_id(layout, index) -> str:
    key = json.loads((_home(layout, index) / "node_key.json").read_text())  # p2p/key.go NodeKey
    assert set(key) == {"priv_key"} and key["priv_key"]["type"] == "tendermint/PrivKeyEd25519"
    return hashlib.sha256(_pubkey_of_private(key["priv_key"]["value"])).digest()[:20].hex()


def test_config_toml_gives_each_node_distinct_loopback_ports_and_names_its_peers(cometbft_net):
    layout, config = cometbft_net
    node_ids = [_node_id(layout, i) for i in range(VALIDATORS)]
    assert len(set(node_ids)) == VALIDATORS
    seen_ports = []
    for i in range(VALIDATORS):
        document = tomllib.loads((_home(layout, i) / "config.toml").read_text())
        # config/toml.go: base keys at the top level, then the [rpc], [p2p], [consensus] ... tables.
        assert document["version"].startswith("0.38.")
        assert document["moniker"] == f"validator-{i}"
        assert document["abci"] == "socket"
        assert document["genesis_file"] == "config/genesis.json"
        assert document["priv_validator_key_file"] == "config/priv_validator_key.json"
        assert document["node_key_file"] == "config/node_key.json"
        assert document["proxy_app"] == layout.app_address(config, i)  # the home's socket, or TCP when too deep
        assert document["rpc"]["laddr"] == f"tcp://127.0.0.1:{config.rpc_port(i)}"
        p2p = document["p2p"]
        assert p2p["laddr"] == f"tcp://127.0.0.1:{config.p2p_port(i)}"
        assert p2p["allow_duplicate_ip"] is True
        assert p2p["addr_book_strict"] is False
        peers = p2p["persistent_peers"].split(",")
        expected = {f"{node_ids[j]}@127.0.0.1:{config.p2p_port(j)}" for j in range(VALIDATORS) if j != i}
        assert set(peers) == expected and len(peers) == VALIDATORS - 1
        assert document["consensus"]["timeout_commit"] == "700ms"
        assert isinstance(document["mempool"]["size"], int) and isinstance(document["rpc"]["max_body_bytes"], int)
        assert document["instrumentation"]["prometheus"] is True  # CometBFT's metrics, on loopback
        assert document["instrumentation"]["prometheus_listen_addr"] == f"127.0.0.1:{config.prometheus_port(i)}"
        assert document["trolly"]["metrics_listen_addr"] == f"127.0.0.1:{config.app_metrics_port(i)}"
        # the console's worker page calls the node from the console's origins, as 127.0.0.1 and as localhost
        assert document["rpc"]["cors_allowed_origins"] == [f"http://127.0.0.1:{config.console_port()}",
                                                           f"http://localhost:{config.console_port()}"]
        seen_ports += [config.abci_port(i), config.rpc_port(i), config.p2p_port(i), config.prometheus_port(i),
                       config.app_metrics_port(i)]
    assert len(seen_ports) == len(set(seen_ports))


def _missing() -> None:
    raise CometbftMissing("no `cometbft` found (looked in /nowhere and PATH): install Go")


def test_without_cometbft_the_default_engine_falls_back_to_solo_in_one_line():
    choice = choose_engine(None, None, find=_missing)
    assert (choice.engine, choice.validators, choice.cometbft) == ("solo", 1, None)
    assert "no `cometbft` found" in choice.note and "solo engine" in choice.note and "\n" not in choice.note


def test_with_cometbft_the_default_is_four_validators_on_it():
    binary = CometbftBinary("/opt/cometbft", "0.38.26")
    choice = choose_engine(None, None, find=lambda: binary)
    assert (choice.engine, choice.validators, choice.cometbft, choice.note) == ("cometbft", 4, binary, "")
    assert choose_engine("solo", None, find=_missing).engine == "solo"


@pytest.mark.parametrize("engine, validators", [("cometbft", None), (None, 3)])
def test_asking_for_cometbft_without_a_binary_fails_and_says_how_to_get_it(engine, validators):
    with pytest.raises(LocalnetError, match="no `cometbft` found.*install Go"):
        choose_engine(engine, validators, find=_missing)


def test_a_wrong_cometbft_version_is_refused_by_up_before_anything_is_written(tmp_path, monkeypatch):
    """`find_cometbft`'s refusal of a v0.37 stand-in (on a search path of its own: the test's venv may hold the
    real binary) reaches the user through `up`, and nothing is written."""
    import trolly.localnet.network as network

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cometbft").write_text("#!/bin/sh\necho 0.37.4\n")
    (bin_dir / "cometbft").chmod(0o755)
    monkeypatch.setattr(network, "find_cometbft", lambda: find_cometbft(beside=tmp_path / "none", search_path=str(bin_dir)))
    net = Localnet(tmp_path / "net", LocalnetConfig(validators=3, workers=0, slow_workers=0, base_port=BASE + 200))
    with pytest.raises(LocalnetError, match="0.37.4.*needs v0.38.x.*v0.38.26"):
        net.up()
    assert not (tmp_path / "net").exists()


# ------------------------------------------------------------------------------------------- supervisor


def _sleeper(name: str, script: str) -> ServiceSpec:
    return ServiceSpec(name, ("/bin/sh", "-c", script))


def test_stop_all_ends_each_service_and_the_children_it_spawned(tmp_path):
    supervisor = Supervisor(tmp_path)
    first = supervisor.start(_sleeper("first", "sleep 60 & sleep 60 & echo ready; wait"))
    second = supervisor.start(_sleeper("second", "sleep 60"))
    time.sleep(0.3)
    family = process_family({first.pid, second.pid})
    assert len(family) >= 4, f"expected the shells and their sleeps, found {family}"
    assert set(supervisor.records()) == {"first", "second"}
    supervisor.stop_all(timeout=5)
    assert survivors(family) == []
    assert supervisor.records() == {}
    assert "ready" in supervisor.log_file("first").read_text()


def test_a_service_ignoring_sigterm_is_killed_after_the_timeout(tmp_path):
    supervisor = Supervisor(tmp_path)
    proc = supervisor.start(_sleeper("stubborn", "trap '' TERM; sleep 60; sleep 60"))
    time.sleep(0.3)
    family = process_family({proc.pid})
    started = time.monotonic()
    supervisor.stop_all(timeout=0.5)
    assert time.monotonic() - started < 5
    assert survivors(family) == []


def test_down_from_another_supervisor_works_through_the_pid_files(tmp_path):
    proc = Supervisor(tmp_path).start(_sleeper("service", "sleep 60"))
    other = Supervisor(tmp_path)
    assert other.is_running("service")
    other.stop_all(timeout=5)
    proc.wait(timeout=5)
    assert proc.returncode == -signal.SIGTERM


def test_a_reused_pid_is_not_taken_for_the_recorded_service(tmp_path):
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        supervisor = Supervisor(tmp_path)
        supervisor.run_dir.mkdir(parents=True)
        # A pid file naming a live process that started at another time: the pid was reused.
        supervisor.pid_file("old").write_text(json.dumps({"pid": stranger.pid, "start_time": "1", "argv": []}))
        assert not supervisor.is_running("old")
        supervisor.stop_all(timeout=1)
        assert stranger.poll() is None, "the supervisor signalled a process it did not start"
        assert supervisor.records() == {}
    finally:
        stranger.kill()
        stranger.wait()


def test_starting_a_running_service_again_is_refused(tmp_path):
    supervisor = Supervisor(tmp_path)
    supervisor.start(_sleeper("once", "exec sleep 60"))
    try:
        with pytest.raises(ServiceError, match="already running"):
            supervisor.start(_sleeper("once", "exec sleep 60"))
    finally:
        supervisor.stop_all(timeout=5)


def test_wait_ready_reports_a_service_that_exits_before_listening(tmp_path):
    supervisor = Supervisor(tmp_path)
    spec = ServiceSpec("broken", ("/bin/sh", "-c", "echo cannot start; exit 3"),
                       ready_address=f"tcp://127.0.0.1:{BASE + 399}")
    supervisor.start(spec)
    with pytest.raises(ServiceError, match=f"exited with code 3 during start-up, before it listened on "
                                           f"tcp://127.0.0.1:{BASE + 399}; see .*broken.log"):
        supervisor.wait_ready(spec, timeout=10)
    supervisor.stop_all(timeout=1)


def test_wait_ready_returns_once_the_port_listens(tmp_path):
    supervisor = Supervisor(tmp_path)
    port = BASE + 398
    spec = ServiceSpec("listener", (sys.executable, "-c", (
        "import socket, time; time.sleep(0.3); s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")), ready_address=f"tcp://127.0.0.1:{port}")
    supervisor.start(spec)
    try:
        supervisor.wait_ready(spec, timeout=20)
    finally:
        supervisor.stop_all(timeout=5)


def _stale_socket(path: Path) -> None:
    """A unix socket file nobody listens on, as a SIGKILLed server leaves it."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
        left.bind(str(path))
    assert stat.S_ISSOCK(path.lstat().st_mode)


def test_wait_ready_returns_once_the_unix_socket_listens_and_a_stale_one_does_not_count(tmp_path):
    supervisor = Supervisor(tmp_path)
    path = tmp_path / "app.sock"
    _stale_socket(path)
    # The stand-in replaces the stale socket after a while, as the ABCI server does (bound aside, renamed on it).
    spec = ServiceSpec("listener", (sys.executable, "-c", (
        "import os, socket, time; time.sleep(1.0); s = socket.socket(socket.AF_UNIX); "
        f"s.bind({str(path) + '.new'!r}); s.listen(); os.replace({str(path) + '.new'!r}, {str(path)!r}); "
        "open('listening', 'w').close(); time.sleep(60)")), ready_address=f"unix://{path}")
    supervisor.start(spec)
    try:
        supervisor.wait_ready(spec, timeout=20)
        assert (tmp_path / "listening").exists(), "wait_ready returned before the service listened"
    finally:
        supervisor.stop_all(timeout=5)


def test_wait_ready_on_a_unix_socket_names_it_when_the_service_exits_or_never_listens(tmp_path):
    supervisor = Supervisor(tmp_path)
    path = tmp_path / "app.sock"
    _stale_socket(path)
    broken = ServiceSpec("broken", ("/bin/sh", "-c", "exit 4"), ready_address=f"unix://{path}")
    supervisor.start(broken)
    with pytest.raises(ServiceError, match=f"broken exited with code 4 during start-up, before it listened on "
                                           f"unix://{path}; see .*broken.log"):
        supervisor.wait_ready(broken, timeout=10)
    silent = ServiceSpec("silent", ("sleep", "60"), ready_address=f"unix://{path}")
    supervisor.start(silent)
    try:
        with pytest.raises(ServiceError, match=f"silent did not listen on unix://{path} within 1s"):
            supervisor.wait_ready(silent, timeout=1)
    finally:
        supervisor.stop_all(timeout=5)


def test_wait_ready_refuses_an_address_it_cannot_connect_to(tmp_path):
    spec = ServiceSpec("odd", ("sleep", "60"), ready_address="udp://127.0.0.1:1")
    with pytest.raises(ServiceError, match="cannot wait for 'udp://127.0.0.1:1': expected unix://PATH or tcp://"):
        Supervisor(tmp_path).wait_ready(spec, timeout=1)


# ----------------------------------------------------------------------------------------- progress line


def _view(**changes) -> TaskView:
    return TaskView.from_answer(task_answer(**changes))


def test_progress_line_of_an_open_task_counts_the_workers_joined():
    line = progress_line(_view(status="open", phase="join", workers_joined=1, progress="round 1 of 3"))
    assert line.startswith("task 7 open | round 1 of 3 | 1/3 workers joined | phase join")


def test_progress_line_counts_commits_and_verdicts_and_names_the_slashed():
    commitments = [
        commitment_answer(outcome="passed", verdicts=[vote_answer(), vote_answer(segment=1)]),
        commitment_answer(outcome="pending", verdicts=[vote_answer()]),
        commitment_answer(outcome="failed", verdicts=[vote_answer(), vote_answer(segment=1)]),
    ]
    cheater, honest = address(3), address(4)
    members = [member_answer(worker=cheater, status="slashed"), member_answer(worker=honest, index=1)]
    line = progress_line(_view(round_details=[round_answer(round=1, commitments=commitments)], members=members))
    assert "round 1: 3 commits, 5 verdicts, outcomes failed,passed,pending" in line
    assert "paid 1200utrl to workers, 60utrl fees" in line
    assert f"dropped/slashed: {cheater[:12]}.. slashed" in line and honest[:12] not in line


def test_progress_line_labels_the_final_report():
    line = progress_line(_view(status="completed", phase="done",
                               round_details=[round_answer(round=3, final_report=True)]))
    assert "final weights: 0 commits, 0 verdicts, outcomes -" in line


# ----------------------------------------------------------------------------------------------- help

COMMANDS = ["up", "down", "status", "logs", "kill", "start", "restart", "add-node", "reset", "demo"]


def test_the_command_list_is_complete():
    assert sorted(main.commands) == sorted(COMMANDS)


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)])
def test_every_command_has_help(command):
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_status_of_a_missing_localnet_fails_clearly(tmp_path):
    result = CliRunner().invoke(main, ["status", "--home", str(tmp_path / "none")])
    assert result.exit_code == 1


def test_restarting_an_unknown_service_names_the_real_ones(tmp_path):
    from trolly.localnet.network import Localnet

    init_localnet(Layout(tmp_path), LocalnetConfig(engine="solo", validators=1, workers=1))
    result = CliRunner().invoke(main, ["restart", "--home", str(tmp_path), "worker-7"])
    output = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 1
    assert "no service 'worker-7'" in output and "app-0, engine-0, verifier-0, worker-0" in output
    assert Localnet(tmp_path).running_services() == []


def test_up_refuses_ports_in_use_before_starting_anything(tmp_path):
    import socket

    from trolly.localnet.network import Localnet

    config = LocalnetConfig(workers=1, base_port=BASE + 600)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", config.blob_port(0)))
        squatter.listen()
        with pytest.raises(LocalnetError, match=f"port\\(s\\) {config.blob_port(0)} \\(blobs of worker-0\\) on 127.0.0.1 in use"):
            Localnet(tmp_path / "net", config).up()
    assert not (tmp_path / "net").exists(), "nothing is written: the next `up` may choose another --base-port"


@pytest.mark.parametrize("name", ["digits", "digits-wasm32", "lora-text"])
def test_each_demo_task_pays_for_a_spec_the_chain_accepts_within_the_demo_budget(name, tmp_path):
    from trolly.chain.market.params import MarketParams
    from trolly.chain.market.spec import validate_spec
    from trolly.compute.data.encryption import DataKeyError
    from trolly.compute.data.manifest import load_dataset
    from trolly.compute.spec import lora_text_spec, parse_spec
    from trolly.localnet.demo import DEMO_BUDGET
    from trolly.localnet.demo_tasks import DEMO_TASKS
    from trolly.wallet.tasks import plan_task

    task = DEMO_TASKS[name]
    data = task.data(tmp_path)
    spec = task.spec(data.section("http://127.0.0.1:1"), task.rounds)
    parsed = parse_spec(spec)
    assert parsed.dataset.manifest_hash == data.manifest_hash and parsed.dataset.urls == ("http://127.0.0.1:1",)
    assert plan_task(spec, MarketParams(), DEMO_BUDGET, None, 3, 2, None).rounds == task.rounds
    assert data.dataset().shape.kind == ("text-classification" if name == "lora-text" else "classification")
    assert ("wasm32" in parsed.kernels) == (name == "digits-wasm32")  # browser workers may train it
    if name == "lora-text":  # the LoRA task's codec and optimizer are the shared builder's, only its size is the demo's
        shared = lora_text_spec("ab" * 32, rank=4, batch_size=8, rounds=task.rounds, inner_steps=20)
        assert json.loads(spec)["codec"] == shared["codec"]
        assert json.loads(spec)["training"]["inner_optimizer"] == shared["training"]["inner_optimizer"]
        # the requester's own texts, packed for lora-text and private: a stranger with the blobs reads nothing
        assert (parsed.dataset.name, parsed.dataset.context) == ("packed", 64)
        assert validate_spec(spec, task.rounds).private_data and data.key is not None
        lines = (tmp_path / "pydocs.jsonl").read_text().splitlines()
        assert json.loads(lines[0]).keys() == {"text", "label"}
        assert len(lines) == len(data.dataset().train_targets) + len(data.dataset().test_targets)
        with pytest.raises(DataKeyError):
            load_dataset(data.manifest_hash, data.store.get)
    else:
        assert data.key is None and parsed.dataset.name == "digits"


def test_the_observer_evaluates_w0_and_flags_weights_the_chain_disagrees_with(tmp_path):
    import asyncio

    from trolly.compute.blobs import BlobStore
    from trolly.compute.data import build_dataset, dataset_from_blobs
    from trolly.compute.spec import parse_spec
    from trolly.localnet.demo_tasks import digits_spec
    from trolly.localnet.observer import TrainingObserver

    blobs = build_dataset("digits")
    spec = parse_spec(digits_spec({"name": "digits", "manifest_hash": blobs.manifest_hash,
                                   "urls": ["http://127.0.0.1:1"]}, rounds=2))
    observer = TrainingObserver(spec, dataset_from_blobs(blobs), BlobStore(tmp_path))
    answer = task_answer(round=0, rounds=2, round_details=[round_answer(round=0)])
    view = TaskView.from_answer(answer)
    (line,) = asyncio.run(observer.advance(view))
    loss = float(line.split("held-out loss ")[1].split(",")[0])
    assert line.startswith("W_0") and 2.0 < loss < 2.6  # untrained: about ln(10)
    assert asyncio.run(observer.advance(view)) == []  # nothing new until round 0 settles
    assert observer.mismatches(view) == []
    answer["round_details"][0]["start_weights_hash"] = "ab" * 32
    (wrong,) = observer.mismatches(TaskView.from_answer(answer))
    assert wrong.startswith("W_0: recomputed") and "chain abababab" in wrong


@pytest.mark.parametrize("text", ['{"engine": "solo", "gpus": 2}', "{not json", '["solo"]'])
def test_a_localnet_json_this_version_cannot_read_says_to_reset(tmp_path, text):
    layout = Layout(tmp_path)
    layout.config_file.write_text(text)
    with pytest.raises(LocalnetError, match="cannot be read by this version .*`trolly-localnet reset`"):
        layout.load()


@pytest.mark.parametrize("engine", ["cometbft", "solo"])
def test_an_app_in_a_home_too_deep_for_a_socket_listens_on_loopback_tcp(tmp_path, engine):
    config = LocalnetConfig(engine=engine, validators=4 if engine == "cometbft" else 1)
    # pytest's own temporary directory may already be too deep (its path grows with the run's number)
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="t") as short:
        shallow = Layout(Path(short) / "n")
        assert shallow.app_address(config, 0) == f"unix://{shallow.app_socket(0)}"
    deep = Layout(tmp_path / ("d" * 120))
    assert deep.app_address(config, 0) == f"tcp://127.0.0.1:{config.abci_port(0)}"
    # a socket path that fits while the server's private staging path beside it does not
    borderline = Layout(tmp_path / ("b" * (103 - 1 - len(str(tmp_path / "nodes/node-0/data/app.sock")))))
    assert len(str(borderline.app_socket(0))) <= 107
    assert borderline.app_address(config, 0).startswith("tcp://")


def _argument(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_cometbft_node_dials_its_app_on_the_unix_socket_the_app_listens_on(tmp_path):
    from trolly.localnet.services import app_service, engine_service

    config = LocalnetConfig(engine="cometbft", validators=2, workers=0, slow_workers=0, base_port=BASE + 800)
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="t") as short:
        layout = Layout(Path(short) / "n")
        init_localnet(layout, config)
        for i in range(config.validators):
            socket_address = f"unix://{layout.app_socket(i)}"
            proxy_app = tomllib.loads((_home(layout, i) / "config.toml").read_text())["proxy_app"]
            app = app_service(layout, config, i)
            cometbft = engine_service(layout, config, i, "/usr/bin/cometbft")
            dialed = _argument(cometbft.argv, "--proxy_app")
            assert proxy_app == _argument(app.argv, "--abci") == dialed == socket_address
            assert app.ready_address == socket_address  # its CometBFT starts once the app listens there


def test_a_cometbft_node_in_a_home_too_deep_for_a_socket_dials_its_app_on_its_abci_port(tmp_path):
    from trolly.localnet.services import app_service, engine_service

    config = LocalnetConfig(engine="cometbft", validators=2, workers=0, slow_workers=0, base_port=BASE + 800)
    layout = Layout(tmp_path / ("d" * 120))
    init_localnet(layout, config)
    for i in range(config.validators):
        tcp = f"tcp://127.0.0.1:{config.abci_port(i)}"
        proxy_app = tomllib.loads((_home(layout, i) / "config.toml").read_text())["proxy_app"]
        app, cometbft = app_service(layout, config, i), engine_service(layout, config, i, "/usr/bin/cometbft")
        assert proxy_app == _argument(app.argv, "--abci") == _argument(cometbft.argv, "--proxy_app") == tcp
        assert app.ready_address == tcp


def test_a_solo_engine_dials_its_app_where_it_listens_without_a_readiness_wait(tmp_path):
    from trolly.localnet.services import app_service, engine_service

    config = LocalnetConfig(engine="solo", validators=1, workers=0, slow_workers=0)
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="t") as short:
        layout = Layout(Path(short) / "n")
        app, engine = app_service(layout, config, 0), engine_service(layout, config, 0, None)
        socket_address = f"unix://{layout.app_socket(0)}"
        assert _argument(app.argv, "--abci") == _argument(engine.argv, "--proxy-app") == socket_address
        assert app.ready_address == ""  # the solo engine dials again until its app answers


@pytest.mark.slow
def test_an_app_sigkilled_leaves_a_stale_socket_and_binds_it_again_when_started(tmp_path):
    """`trolly-localnet kill validator-<i>` then `start`: the killed app cannot remove its socket file; the new
    one replaces it (abci_app/server.py `bind_private_unix_socket`) and the readiness wait sees it listen."""
    import socket

    from trolly.localnet.services import app_service

    config = LocalnetConfig(engine="cometbft", validators=1, workers=0, slow_workers=0, base_port=BASE + 800)
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="t") as short:
        layout = Layout(Path(short) / "n")
        init_localnet(layout, config)
        supervisor = Supervisor(layout.home)
        app = app_service(layout, config, 0)
        assert app.ready_address.startswith("unix://")
        try:
            supervisor.start(app)
            supervisor.wait_ready(app, timeout=60)
            assert supervisor.kill(app.name)
            socket_path = layout.app_socket(0)
            assert stat.S_ISSOCK(socket_path.lstat().st_mode), "a SIGKILLed app leaves its socket file"
            with socket.socket(socket.AF_UNIX) as probe, pytest.raises(ConnectionRefusedError):
                probe.connect(str(socket_path))
            supervisor.start(app)
            supervisor.wait_ready(app, timeout=60)
            assert supervisor.is_running(app.name)
            assert stat.S_IMODE(socket_path.lstat().st_mode) == 0o600
        finally:
            supervisor.stop_all(timeout=10)


def test_the_console_gets_the_localnets_access_token_in_its_environment_and_its_address_names_it(tmp_path):
    """The console answers only a browser that opened its address with the access token (issue 32 item 5): the
    localnet keeps one token (0600 in its home, the same at every restart of the console), hands it to the console
    in its environment, never on its command line (which other users can read), and prints it in the address."""
    from trolly.localnet.clients import console_service
    from trolly.wallet.command_line.options import CONSOLE_TOKEN_ENVIRONMENT_VARIABLE

    layout, config = Layout(tmp_path), LocalnetConfig(base_port=31000)
    spec = console_service(layout, config)
    token = spec.env[CONSOLE_TOKEN_ENVIRONMENT_VARIABLE]
    assert len(token) >= 32 and token == layout.console_token() and token not in " ".join(spec.argv)
    assert stat.S_IMODE(layout.console_token_file.stat().st_mode) == 0o600
    assert layout.console_address(config) == f"http://127.0.0.1:31091/?token={token}"
    assert console_service(layout, config).env == spec.env  # a restart gets the same token
