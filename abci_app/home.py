"""A node's home directory, laid out exactly as CometBFT v0.38 expects it.

`trolly-node init` and the localnet write the same files CometBFT's own `cometbft init` writes, so that
`cometbft node --home H` and `trolly-node start --home H` (plus the solo engine) can share one home:

    H/config/genesis.json              genesis doc: chain id, consensus params, validators, app_state
    H/config/config.toml               CometBFT node config (proxy_app, [rpc], [p2p], [consensus], ...)
    H/config/priv_validator_key.json   the validator's ed25519 consensus key (secret, 0600)
    H/config/node_key.json             the p2p node key (secret, 0600)
    H/data/priv_validator_state.json   last signed height/round/step (double-sign protection)

The application keeps its own LevelDB under `H/data/application.db` and its state-sync snapshots under
`H/data/snapshots/`, the solo engine its block store under `H/data/solo_engine.db`; none collides with CometBFT's `blockstore.db`/`state.db`.

Every function here is a library call (the CLI is a thin layer over them); the localnet calls
`write_localnet_homes` (or `write_home` once per validator with a shared genesis and each node's persistent
peers). Genesis building lives in `home_genesis`, config.toml in `home_config`; both are re-exported here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import shutil
import tomllib
from dataclasses import dataclass

import tomli_w

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.wallet.files import write_atomically  # the one leaf of wallet abci_app may import

from .home_config import NodeConfig, config_toml, read_node_options, signature_checker_enabled  # noqa: F401
from .home_config import app_metrics_settings, prometheus_address  # noqa: F401 (re-exported)
from .home_genesis import (  # noqa: F401  (re-exported: the public face of home generation)
    COMETBFT_VERSION,
    DEFAULT_DEV_BALANCE,
    DEFAULT_POWER_REDUCTION,
    DEFAULT_VALIDATOR_STAKE,
    PRIVKEY_TYPE,
    PUBKEY_TYPE,
    GenesisValidator,
    HomeError,
    build_app_state,
    build_genesis,
    check_chain_id,
    default_consensus_params,
    dev_genesis,
    format_time,
    localnet_genesis,
    parse_time,
)

APPLICATION_DB = "application.db"
ENGINE_DB = "solo_engine.db"
SNAPSHOTS_DIR = "snapshots"


# ------------------------------------------------------------------------------------------------ keys


@dataclass(frozen=True)
class ValidatorKey:
    """An ed25519 key in CometBFT's JSON key-file form (priv_validator_key.json / node_key.json)."""

    seed: bytes

    @property
    def private_key(self) -> PrivateKey:
        return PrivateKey(self.seed)

    @property
    def pubkey(self) -> bytes:
        return self.private_key.pubkey

    @property
    def address(self) -> bytes:
        """CometBFT validator address: sha256(pubkey)[:20]."""
        return hashlib.sha256(self.pubkey).digest()[:20]

    @property
    def node_id(self) -> str:
        """CometBFT p2p node id: lower-case hex of the address (used in `id@host:port` peers)."""
        return self.address.hex()

    @staticmethod
    def generate() -> "ValidatorKey":
        return ValidatorKey(os.urandom(32))


def priv_validator_key_json(key: ValidatorKey) -> dict:
    return {
        "address": key.address.hex().upper(),
        "pub_key": {"type": PUBKEY_TYPE, "value": base64.b64encode(key.pubkey).decode()},
        # CometBFT stores the 64-byte Go ed25519 private key: seed followed by public key.
        "priv_key": {"type": PRIVKEY_TYPE, "value": base64.b64encode(key.seed + key.pubkey).decode()},
    }


def node_key_json(key: ValidatorKey) -> dict:
    return {"priv_key": {"type": PRIVKEY_TYPE, "value": base64.b64encode(key.seed + key.pubkey).decode()}}


def parse_key_file(data: dict, what: str) -> ValidatorKey:
    """The key inside a priv_validator_key.json or node_key.json document; checks that it is consistent."""
    try:
        priv = data["priv_key"]
        if priv["type"] != PRIVKEY_TYPE:
            raise HomeError(f"{what}: unsupported key type {priv['type']!r} (only {PRIVKEY_TYPE})")
        raw = base64.b64decode(priv["value"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise HomeError(f"{what}: malformed key file ({exc})") from None
    if len(raw) != 64:
        raise HomeError(f"{what}: private key must be 64 bytes (seed||pubkey), got {len(raw)}")
    key = ValidatorKey(raw[:32])
    if key.pubkey != raw[32:]:
        raise HomeError(f"{what}: public half does not match the seed")
    if "pub_key" in data and base64.b64decode(data["pub_key"]["value"]) != key.pubkey:
        raise HomeError(f"{what}: pub_key does not match priv_key")
    return key


# ------------------------------------------------------------------------------------------------ home


@dataclass(frozen=True)
class HomePaths:
    root: pathlib.Path

    @property
    def config_dir(self) -> pathlib.Path:
        return self.root / "config"

    @property
    def data_dir(self) -> pathlib.Path:
        return self.root / "data"

    @property
    def genesis(self) -> pathlib.Path:
        return self.config_dir / "genesis.json"

    @property
    def config(self) -> pathlib.Path:
        return self.config_dir / "config.toml"

    @property
    def priv_validator_key(self) -> pathlib.Path:
        return self.config_dir / "priv_validator_key.json"

    @property
    def node_key(self) -> pathlib.Path:
        return self.config_dir / "node_key.json"

    @property
    def priv_validator_state(self) -> pathlib.Path:
        return self.data_dir / "priv_validator_state.json"

    @property
    def application_db(self) -> pathlib.Path:
        return self.data_dir / APPLICATION_DB

    @property
    def engine_db(self) -> pathlib.Path:
        return self.data_dir / ENGINE_DB

    @property
    def snapshots_dir(self) -> pathlib.Path:
        """The app's state-sync snapshots (`snapshot_store`)."""
        return self.data_dir / SNAPSHOTS_DIR

    def exists(self) -> bool:
        return self.genesis.exists() or self.priv_validator_key.exists() or self.config.exists()


def _write_file(path: pathlib.Path, text: str, secret: bool = False) -> None:
    """Write atomically and durably (`trolly.wallet.files`): a crash or power loss never leaves a half-written
    file; secrets are 0600, the rest 0644."""
    write_atomically(path, text.encode(), mode=0o600 if secret else 0o644)


def write_json(path: pathlib.Path, document: dict, secret: bool = False) -> None:
    _write_file(path, json.dumps(document, indent=2) + "\n", secret)


def write_home(
    root: str | os.PathLike,
    genesis: dict,
    validator_key: ValidatorKey,
    node_key: ValidatorKey | None = None,
    config: NodeConfig | None = None,
    force: bool = False,
) -> HomePaths:
    """Write every file of a home. Refuses an existing home unless `force` (which also wipes `data/`)."""
    paths = HomePaths(pathlib.Path(root))
    if paths.exists() and not force:
        raise HomeError(f"{paths.root} already holds a node home; use --force to overwrite it (this wipes data/)")
    check_chain_id(genesis.get("chain_id", ""))
    if force and paths.data_dir.exists():
        shutil.rmtree(paths.data_dir)
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.config_dir, 0o700)
    os.chmod(paths.data_dir, 0o700)
    write_json(paths.priv_validator_key, priv_validator_key_json(validator_key), secret=True)
    write_json(paths.node_key, node_key_json(node_key or ValidatorKey.generate()), secret=True)
    write_json(paths.priv_validator_state, {"height": "0", "round": 0, "step": 0}, secret=True)
    _write_file(paths.config, tomli_w.dumps(config_toml(config or NodeConfig())))
    # genesis last: its presence marks a complete home.
    write_json(paths.genesis, genesis)
    return paths


def init_home(
    root: str | os.PathLike,
    chain_id: str,
    moniker: str = "trolly-node",
    dev: bool = False,
    config: NodeConfig | None = None,
    force: bool = False,
) -> HomePaths:
    """`trolly-node init`: a fresh validator key and a genesis naming it.

    With `dev`, the genesis funds `dev_key(0)` and bonds this validator with the dev key as operator (what
    `trolly-node dev` uses). Without it, no publicly known key gets anything: the validator's own consensus
    key is its operator (its address is sha256(pubkey)[:20], like any account), funded with exactly its
    stake. A chain needs one validator to make blocks; operators of a real network edit `app_state`
    (accounts, more validators) before the first start.
    """
    paths = HomePaths(pathlib.Path(root))
    if paths.exists() and not force:
        raise HomeError(f"{paths.root} already holds a node home; use --force to overwrite it (this wipes data/)")
    key = ValidatorKey.generate()
    if dev:
        genesis = dev_genesis(chain_id, [key.pubkey])
    else:
        operator = encode_address(key.address)
        validator = GenesisValidator(key.pubkey, operator, DEFAULT_VALIDATOR_STAKE, moniker)
        app_state = build_app_state({operator: DEFAULT_VALIDATOR_STAKE}, [validator], params={},  # chain defaults
                                    public_keys=[key.pubkey])  # the operator's key is the validator's
        genesis = build_genesis(chain_id, app_state, [validator])
    config = config or NodeConfig(moniker=moniker)
    return write_home(root, genesis, key, config=config, force=force)


def write_localnet_homes(
    directory: str | os.PathLike,
    chain_id: str,
    count: int,
    base_port: int = 26600,
    host: str = "127.0.0.1",
    timeout_commit: str = "1s",
    force: bool = False,
) -> list[HomePaths]:
    """N validator homes `directory/node<i>` sharing one genesis, for real CometBFT on one machine.

    Node i listens on base_port + 10*i (p2p), + 1 (RPC), + 2 (ABCI, the app's `proxy_app`), + 3 (CometBFT's
    metrics), + 4 (the app's metrics),
    and lists every other node in `persistent_peers`; `addr_book_strict = false` and
    `allow_duplicate_ip = true` let them peer over one loopback address.
    """
    if count < 1:
        raise HomeError("a localnet needs at least one validator")
    validator_keys = [ValidatorKey.generate() for _ in range(count)]
    node_keys = [ValidatorKey.generate() for _ in range(count)]
    genesis = localnet_genesis(chain_id, [key.pubkey for key in validator_keys])
    ports = [base_port + 10 * index for index in range(count)]
    written = []
    for index in range(count):
        peers = ",".join(f"{node_keys[j].node_id}@{host}:{ports[j]}" for j in range(count) if j != index)
        config = NodeConfig(
            moniker=f"validator-{index}",
            proxy_app=f"tcp://{host}:{ports[index] + 2}",
            rpc_laddr=f"tcp://{host}:{ports[index] + 1}",
            p2p_laddr=f"tcp://{host}:{ports[index]}",
            persistent_peers=peers,
            addr_book_strict=False,
            allow_duplicate_ip=True,
            timeout_commit=timeout_commit,
            prometheus_listen_addr=f"{host}:{ports[index] + 3}",
            metrics_listen_addr=f"{host}:{ports[index] + 4}",
        )
        root = pathlib.Path(directory) / f"node{index}"
        written.append(write_home(root, genesis, validator_keys[index], node_keys[index], config, force=force))
    return written


@dataclass(frozen=True)
class Home:
    """A loaded home: what the solo engine and the app need from it."""

    paths: HomePaths
    genesis: dict
    config: dict
    validator_key: ValidatorKey
    node_key: ValidatorKey

    @property
    def chain_id(self) -> str:
        return self.genesis["chain_id"]


def read_json(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise HomeError(f"{path} is missing: run `trolly-node init --home {path.parent.parent}` first") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HomeError(f"{path} is not valid JSON: {exc}") from None


def load_home(root: str | os.PathLike) -> Home:
    paths = HomePaths(pathlib.Path(root))
    genesis = read_json(paths.genesis)
    for required in ("chain_id", "genesis_time", "consensus_params"):
        if required not in genesis:
            raise HomeError(f"{paths.genesis} has no {required!r}")
    check_chain_id(genesis["chain_id"])
    try:
        config = tomllib.loads(paths.config.read_text())
    except FileNotFoundError:
        config = config_toml(NodeConfig())
    except tomllib.TOMLDecodeError as exc:
        raise HomeError(f"{paths.config} is not valid TOML: {exc}") from None
    validator_key = parse_key_file(read_json(paths.priv_validator_key), str(paths.priv_validator_key))
    node_key = parse_key_file(read_json(paths.node_key), str(paths.node_key))
    return Home(paths, genesis, config, validator_key, node_key)


def home_from_environment(default: str = "~/.trolly-node") -> pathlib.Path:
    """The default home: `$TROLLY_NODE_HOME` if set (tests use it to stay hermetic), else `~/.trolly-node`."""
    return pathlib.Path(os.environ.get("TROLLY_NODE_HOME") or default).expanduser()


def check_home_chain_id(root: str | os.PathLike, chain_id: str) -> Home:
    """Load a home and refuse it if its genesis is for another chain: a node started from it would never join
    (CometBFT stops on a genesis that does not match its state), and its app would serve the wrong chain."""
    home = load_home(root)
    if home.chain_id != chain_id:
        raise HomeError(f"{home.paths.root} is a home of chain {home.chain_id!r}, not {chain_id!r}: "
                        f"move it away (or start a fresh network) instead of mixing chains")
    return home
