"""Where everything of a localnet lives, which keys it uses, and how its files are generated.

One directory holds a whole network:

    <home>/localnet.json          what `up` needs to know (engine, validators, workers, ports, chain id)
    <home>/wallet/                wallet home with a `test` keyring: requester, validator-<i>, worker-<i>
    <home>/nodes/node-<i>/        CometBFT v0.38 node homes (config/, data/), one per node
    <home>/workers/worker-<i>/    worker homes
    <home>/verifiers/verifier-<i>/  verifier homes
    <home>/logs/, <home>/run/     service logs and pid files

Keys come from the public dev mnemonic (`trolly.chain.hd.DEV_MNEMONIC`) at fixed indices, so a localnet is
reproducible and its accounts are known in advance. They are for local testing only.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from trolly.abci_app.home import (
    GenesisValidator,
    NodeConfig,
    ValidatorKey,
    build_app_state,
    build_genesis,
    write_home,
)
from trolly.abci_app.listen_address import unix_socket_fits
from trolly.abci_app.node_options import NodeOptions
from trolly.chain.crypto import encode_address
from trolly.chain.gov.params import GovParams
from trolly.chain.market.params import MarketParams, longest_reveal_wait
from trolly.chain.params import params_to_json
from trolly.chain.validators import StakingParams
from trolly.chain.hd import COIN_TYPE, DEV_MNEMONIC, dev_key
from trolly.wallet.files import write_atomically

CHAIN_ID = "trolly-localnet"
REQUESTER_INDEX = 100
WORKER_INDEX_BASE = 200
VALIDATOR_INDEX_BASE = 0

ACCOUNT_BALANCE = 1_000_000_000_000  # 1,000,000 TRL each
VALIDATOR_STAKE = 10_000_000
"""10 TRL = 10 power: the stake of the last genesis validator; validator i of n bonds (n - i) times it."""

VERIFICATION_WINDOW = 180
"""Blocks (90s at 500ms) a round's sampled segments wait for verdicts. The market's localnet preset has 20, but
a verifier's first replay (cold imports, the dataset, the model) can take longer than that on a loaded 2-core
machine, which left the demo's round 0 unverified and unpaid; a LoRA task's six replays on a CPU without
avx2 kernels (`ATEN_CPU_CAPABILITY=default`) outlasted 60 blocks. A round settles as soon as every segment is decided, so a
longer window costs time only when verdicts are missing."""

LOCALNET_MARKET = dataclasses.replace(MarketParams.localnet(), verification_window=VERIFICATION_WINDOW)
LOCALNET_PARAMS = {
    "staking": params_to_json(dataclasses.replace(StakingParams.localnet(),
                                                  unbonding_blocks=longest_reveal_wait(LOCALNET_MARKET) + 1)),
    "market": params_to_json(LOCALNET_MARKET),
    "gov": params_to_json(GovParams.localnet()),
}
"""The modules' localnet presets: short periods so a developer sees deadlines (and a proposal's vote) within
seconds. Unbonding takes
the fewest blocks that outlast a vote's wait for its reveal deadline under the longer verification window
(init_chain refuses fewer: a lazy verifier's penalty is taken from what it unbonded since its vote)."""


class LocalnetError(Exception):
    """A localnet operation failed in a way the user can act on."""


ENGINES = ("cometbft", "solo")
DEFAULT_VALIDATORS = {"cometbft": 4, "solo": 1}


@dataclass(frozen=True)
class LocalnetConfig:
    """What `up` needs to know; saved as `<home>/localnet.json`.

    `engine` is "cometbft" (real CometBFT v0.38 processes, one per node) or "solo" (the built-in
    single-validator engine). Nodes 0 .. validators-1 are the genesis validators, named `validator-<i>`;
    `full_nodes` more (added later by `Localnet.add_node`) start from the same genesis as non-validators.

    Ports, all on 127.0.0.1, are offsets from `base_port`: node i uses base + 10i (RPC), + 1 (ABCI, only when
    the home is too deep for the app's unix socket: `Layout.app_address`), + 2 (CometBFT p2p), + 3 (validator i's
    blob relay), + 4 (CometBFT's Prometheus metrics, or the solo engine's), + 5 (the app's metrics), + 6 (verifier
    i's metrics); the demo serves its dataset on base + 90; worker i serves its blobs on base + 100 + i and its
    metrics on base + 120 + i. Two localnets with base ports 200 apart never collide.
    """

    engine: str = "cometbft"
    validators: int = 4
    workers: int = 3
    slow_workers: int = 1
    base_port: int = 26657
    block_time: str = "500ms"
    chain_id: str = CHAIN_ID
    cheat: str = ""
    """Test switch: worker-0 trains dishonestly with this cheat strategy (empty: everyone is honest)."""
    wasm32_workers: int = 0
    """The last this many workers train with the wasm32 kernel (`trolly-worker start --kernel wasm32`), standing
    in for browser tabs; they join only tasks whose spec allows it."""
    full_nodes: int = 0

    @property
    def nodes(self) -> int:
        """Every node of the localnet: the genesis validators, then the full nodes added since."""
        return self.validators + self.full_nodes

    def node_name(self, index: int) -> str:
        """`validator-<i>`: the node's name, its moniker, and its operator key's name in the test keyring."""
        return f"validator-{index}"

    def validator_stake(self, index: int) -> int:
        """Genesis stake of validator `index`: unequal (n - i shares of VALIDATOR_STAKE), so that no two-thirds
        tally is trivial. With 4 validators: 40/30/20/10 % of the power; any three, or validators 0, 1 and
        none else, hold more than two thirds; the three others without validator 0 hold 60 % and do not."""
        return (self.validators - index) * VALIDATOR_STAKE

    def rpc_port(self, index: int = 0) -> int:
        return self.base_port + 10 * index

    def abci_port(self, index: int) -> int:
        return self.base_port + 10 * index + 1

    def p2p_port(self, index: int) -> int:
        return self.base_port + 10 * index + 2

    def blob_port(self, worker: int) -> int:
        return self.base_port + 100 + worker

    def relay_port(self, index: int) -> int:
        """Where validator `index`'s verifier serves a blob relay (`trolly-verifier start --relay-port`)."""
        return self.base_port + 10 * index + 3

    def relay_url(self, index: int = 0) -> str:
        return f"http://127.0.0.1:{self.relay_port(index)}"

    def prometheus_port(self, index: int) -> int:
        """Where node `index`'s CometBFT (or the solo engine) serves its Prometheus metrics."""
        return self.base_port + 10 * index + 4

    def app_metrics_port(self, index: int) -> int:
        """Where node `index`'s app serves its own metrics."""
        return self.base_port + 10 * index + 5

    def verifier_metrics_port(self, index: int) -> int:
        return self.base_port + 10 * index + 6

    def worker_metrics_port(self, worker: int) -> int:
        return self.base_port + 120 + worker

    def metrics_endpoints(self) -> dict[str, str]:
        """Every Prometheus endpoint of this localnet by what serves it (`trolly-localnet status` names them)."""
        engine = "cometbft" if self.engine == "cometbft" else "engine"
        endpoints = {}
        for i in range(self.nodes):
            endpoints[f"{engine}-{i}"] = f"http://127.0.0.1:{self.prometheus_port(i)}/metrics"
            endpoints[f"app-{i}"] = f"http://127.0.0.1:{self.app_metrics_port(i)}/metrics"
        for i in range(self.validators):
            endpoints[f"verifier-{i}"] = f"http://127.0.0.1:{self.verifier_metrics_port(i)}/metrics"
        for i in range(self.workers):
            endpoints[f"worker-{i}"] = f"http://127.0.0.1:{self.worker_metrics_port(i)}/metrics"
        return endpoints

    def data_port(self) -> int:
        """Where `demo` serves the task's dataset."""
        return self.base_port + 90

    def console_port(self) -> int:
        """Where the web console (`trolly-console`) listens."""
        return self.base_port + 91

    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port()}/"

    def console_origins(self) -> list[str]:
        """The origins the console's pages run at (it answers on 127.0.0.1 and localhost): the worker page
        (`/worker`) calls the nodes' JSON-RPC from there, so each node's `[rpc] cors_allowed_origins` names them."""
        return [f"http://{host}:{self.console_port()}" for host in ("127.0.0.1", "localhost")]

    def worker_page_url(self, index: int = 0) -> str:
        """The console's browser worker page against node 0 and validator `index`'s relay (without the console's
        access token: `Layout.worker_page_address` adds it)."""
        return f"{self.console_url()}worker?node={self.rpc_url(0)}&relay={self.relay_url(index)}"

    def ports(self) -> list[int]:
        """Every port this localnet may listen on."""
        return list(self.port_roles())

    def port_roles(self) -> dict[int, str]:
        """Every port this localnet may listen on, with what listens there (for messages naming a taken port)."""
        roles = {}
        for i in range(self.nodes):
            roles[self.rpc_port(i)] = f"RPC of {self.node_name(i)}"
            roles[self.abci_port(i)] = f"ABCI of {self.node_name(i)}"
            roles[self.p2p_port(i)] = f"p2p of {self.node_name(i)}"
            roles[self.prometheus_port(i)] = f"consensus metrics of {self.node_name(i)}"
            roles[self.app_metrics_port(i)] = f"app metrics of {self.node_name(i)}"
        roles.update({self.relay_port(i): f"blob relay of {self.node_name(i)}" for i in range(self.validators)})
        roles.update({self.verifier_metrics_port(i): f"metrics of verifier-{i}" for i in range(self.validators)})
        roles.update({self.worker_metrics_port(i): f"metrics of worker-{i}" for i in range(self.workers)})
        roles[self.data_port()] = "the demo's dataset server"
        roles[self.console_port()] = "the web console"
        roles.update({self.blob_port(i): f"blobs of worker-{i}" for i in range(self.workers)})
        return roles

    def rpc_url(self, index: int = 0) -> str:
        return f"http://127.0.0.1:{self.rpc_port(index)}"


def derivation_path(index: int) -> str:
    return f"m/44'/{COIN_TYPE}'/0'/0'/{index}'"


def key_names(config: LocalnetConfig) -> dict[str, int]:
    """Keyring name -> index on the dev mnemonic."""
    names = {"requester": REQUESTER_INDEX}
    names.update({f"validator-{i}": VALIDATOR_INDEX_BASE + i for i in range(config.nodes)})
    names.update({f"worker-{i}": WORKER_INDEX_BASE + i for i in range(config.workers)})
    return names


class Layout:
    def __init__(self, home: Path) -> None:
        self.home = Path(home).resolve()

    @property
    def config_file(self) -> Path:
        return self.home / "localnet.json"

    @property
    def wallet_home(self) -> Path:
        return self.home / "wallet"

    @property
    def console_token_file(self) -> Path:
        return self.home / "console.token"

    def console_token(self) -> str:
        """The web console's access token: made once (random) and kept 0600 in the home, so the address `up`
        printed still opens the console after `restart console` (the console gets it in its environment)."""
        if not self.console_token_file.exists():
            write_atomically(self.console_token_file, secrets.token_urlsafe(32).encode())
        return self.console_token_file.read_text().strip()

    def console_address(self, config: LocalnetConfig) -> str:
        """Where to open the web console: its URL with its access token."""
        return f"{config.console_url()}?token={self.console_token()}"

    def worker_page_address(self, config: LocalnetConfig) -> str:
        """Where to open a browser worker: the console's worker page with its access token (the console opens a
        session and drops the token from the address, keeping the node and relay)."""
        return f"{config.worker_page_url()}&token={self.console_token()}"

    def node_home(self, index: int) -> Path:
        return self.home / "nodes" / f"node-{index}"

    def worker_home(self, index: int) -> Path:
        return self.home / "workers" / f"worker-{index}"

    def verifier_home(self, index: int) -> Path:
        return self.home / "verifiers" / f"verifier-{index}"

    def app_socket(self, index: int) -> Path:
        return self.node_home(index) / "data" / "app.sock"

    def app_address(self, config: LocalnetConfig, index: int) -> str:
        """Where node `index`'s app listens, and its engine dials it, for either engine: the home's 0600 unix
        socket, or loopback TCP on the node's ABCI port when the home is too deep for a socket path
        (`unix_socket_fits`). A unix socket spares the engine and the app the loopback TCP stack on every ABCI
        round trip, and no other user can connect to it."""
        socket_path = self.app_socket(index)
        if unix_socket_fits(socket_path):
            return f"unix://{socket_path}"
        return f"tcp://127.0.0.1:{config.abci_port(index)}"

    def exists(self) -> bool:
        return self.config_file.is_file()

    def load(self) -> LocalnetConfig:
        """The saved configuration; a file this version cannot read is an error that says to `reset`."""
        if not self.exists():
            raise LocalnetError(f"no localnet at {self.home}: run `trolly-localnet up` first")
        try:
            saved = json.loads(self.config_file.read_text())
            unknown = set(saved) - {f.name for f in dataclasses.fields(LocalnetConfig)}
            if unknown:
                raise ValueError(f"unknown setting(s) {', '.join(sorted(unknown))}")
            return LocalnetConfig(**saved)
        except (ValueError, TypeError) as exc:
            raise LocalnetError(f"{self.config_file} cannot be read by this version ({exc}); "
                                f"`trolly-localnet reset` makes a fresh localnet") from None

    def save(self, config: LocalnetConfig) -> None:
        write_atomically(self.config_file, (json.dumps(asdict(config), indent=2) + "\n").encode(), mode=0o644)

    def remove(self) -> None:
        if self.home.exists():
            shutil.rmtree(self.home)


def localnet_genesis(config: LocalnetConfig, validator_keys: list[ValidatorKey]) -> dict:
    """Every localnet account funded, with its public key (so a private task's data key can be sealed to an
    operator or worker before it signs anything); validator i bonded from validator-i's account."""
    names = key_names(config)
    accounts = {encode_address(dev_key(index).address): ACCOUNT_BALANCE for index in names.values()}
    public_keys = [dev_key(index).pubkey for index in names.values()]
    validators = [
        GenesisValidator(
            key.pubkey, encode_address(dev_key(VALIDATOR_INDEX_BASE + i).address), config.validator_stake(i),
            config.node_name(i),
        )
        for i, key in enumerate(validator_keys)
    ]
    params = json.loads(json.dumps(LOCALNET_PARAMS))  # build_genesis adds seeds from vote extensions
    app_state = build_app_state(accounts, validators, params=params, public_keys=public_keys)
    return build_genesis(config.chain_id, app_state, validators)


MAX_VALIDATORS = 8
"""At most this many nodes (validators and full nodes): node i's ports are base + 10i .. base + 10i + 6; the
ninth node would reach the demo's data port (base + 90)."""
MAX_WORKERS = 16


def check_config(config: LocalnetConfig) -> None:
    """Refuse a configuration that cannot run, before anything is written."""
    if config.engine not in ENGINES:
        raise LocalnetError(f"unknown engine {config.engine!r}: use {' or '.join(ENGINES)}")
    if config.engine == "solo" and config.nodes != 1:
        raise LocalnetError("the solo engine runs exactly one validator; use --engine cometbft for more")
    if not 1 <= config.validators <= config.nodes <= MAX_VALIDATORS:
        raise LocalnetError(f"a localnet has 1 to {MAX_VALIDATORS} nodes, not {config.nodes}")
    if not 0 <= config.slow_workers <= config.workers <= MAX_WORKERS:
        raise LocalnetError(f"a localnet has 0 to {MAX_WORKERS} workers, at most all of them slow "
                            f"(got {config.workers} workers, {config.slow_workers} slow)")
    if not 1024 <= config.base_port or max(config.ports()) > 65535:
        raise LocalnetError(f"base port {config.base_port} puts this localnet's ports outside 1024..65535")


def init_localnet(layout: Layout, config: LocalnetConfig) -> None:
    """Write every file of a fresh localnet (refuses an existing one: `reset` first)."""
    if layout.exists():
        raise LocalnetError(f"{layout.home} already holds a localnet; use `trolly-localnet reset` for a clean one")
    check_config(config)
    if config.full_nodes:
        raise LocalnetError("a fresh localnet has validators only; add full nodes with `Localnet.add_node`")
    layout.home.mkdir(parents=True, exist_ok=True)
    validator_keys = [ValidatorKey.generate() for _ in range(config.validators)]
    node_keys = [ValidatorKey.generate() for _ in range(config.validators)]
    genesis = localnet_genesis(config, validator_keys)
    peers = [f"{node_keys[i].node_id}@127.0.0.1:{config.p2p_port(i)}" for i in range(config.validators)]
    for i in range(config.validators):
        write_node_home(layout, config, i, genesis, validator_keys[i], node_keys[i],
                        [peer for j, peer in enumerate(peers) if j != i])
    write_test_keyring(layout, config)
    layout.save(config)


def write_node_home(layout: Layout, config: LocalnetConfig, index: int, genesis: dict, validator_key: ValidatorKey,
                    node_key: ValidatorKey, peers: list[str]) -> None:
    """Node `index`'s home as `cometbft testnet` writes one: its app's address (`Layout.app_address`), its ports,
    every other node as a persistent peer, peering over one loopback address allowed, the localnet's short
    `timeout_commit`, and the console's origins in `cors_allowed_origins` (its browser worker page calls the node)."""
    node_config = NodeConfig(
        moniker=config.node_name(index),
        proxy_app=layout.app_address(config, index),
        rpc_laddr=f"tcp://127.0.0.1:{config.rpc_port(index)}",
        p2p_laddr=f"tcp://127.0.0.1:{config.p2p_port(index)}",
        persistent_peers=",".join(peers),
        addr_book_strict=False,
        allow_duplicate_ip=True,
        timeout_commit=config.block_time,
        timeout_propose=LOCALNET_TIMEOUT_PROPOSE,
        prometheus_listen_addr=f"127.0.0.1:{config.prometheus_port(index)}",
        metrics_listen_addr=f"127.0.0.1:{config.app_metrics_port(index)}",
        options=NodeOptions(snapshot_interval=LOCALNET_SNAPSHOT_INTERVAL),
        extra={"rpc": {"cors_allowed_origins": config.console_origins()}},  # the worker page's calls (CORS)
    )
    write_home(layout.node_home(index), genesis, validator_key, node_key=node_key, config=node_config)


LOCALNET_SNAPSHOT_INTERVAL = 20
"""Blocks between a localnet node's state-sync snapshots: a node added later (`add_node`, then `trolly-node init
--state-sync`) finds one within seconds; a localnet's state is small, so each costs little."""

LOCALNET_TIMEOUT_PROPOSE = "2s"
"""How long CometBFT validators wait for a proposal before moving to the next round (default 3s): shorter, so
that a localnet whose proposer was killed moves on sooner, still long enough for a loaded 2-core machine."""


def write_test_keyring(layout: Layout, config: LocalnetConfig) -> None:
    from trolly.wallet.keyring import Keyring

    keyring = Keyring(layout.wallet_home, backend="test")
    for name, index in key_names(config).items():
        if not keyring.exists(name):
            keyring.recover(name, DEV_MNEMONIC, path=derivation_path(index))
