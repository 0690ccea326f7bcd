"""A node's home directory, laid out exactly as CometBFT v0.38 expects it.

`trolly-node init` and the localnet write the same files CometBFT's own `cometbft init` writes, so that
`cometbft node --home H` and `trolly-node start --home H` (plus the solo engine) can share one home:

    H/config/genesis.json              genesis doc: chain id, consensus params, validators, app_state
    H/config/config.toml               CometBFT node config (proxy_app, [rpc], [p2p], [consensus], ...)
    H/config/priv_validator_key.json   the validator's ed25519 consensus key (secret, 0600)
    H/config/node_key.json             the p2p node key (secret, 0600)
    H/data/priv_validator_state.json   last signed height/round/step (double-sign protection)

The application keeps its own LevelDB under `H/data/application.db`, the solo engine its block store under
`H/data/solo_engine.db`; neither collides with CometBFT's `blockstore.db`/`state.db`.

Every function here is a library call (the CLI is a thin layer over them); the localnet calls
`write_home` once per validator with a shared genesis and each node's persistent peers.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import pathlib
import shutil
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any

import tomli_w

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.hd import dev_key

from .errors import AbciAppError

COMETBFT_VERSION = "0.38.17"
"""The CometBFT release whose file formats and RPC shapes this node follows."""

DEFAULT_POWER_REDUCTION = 1_000_000
"""utrl per unit of consensus power (the staking module's default `power_reduction`)."""

DEFAULT_DEV_BALANCE = 1_000_000_000_000
"""What the dev account holds in a dev genesis: 1,000,000 TRL, in utrl."""

DEFAULT_VALIDATOR_STAKE = 10_000_000
"""Self-bond of a dev/localnet genesis validator: 10 TRL, power 10."""

APPLICATION_DB = "application.db"
ENGINE_DB = "solo_engine.db"
PUBKEY_TYPE = "tendermint/PubKeyEd25519"
PRIVKEY_TYPE = "tendermint/PrivKeyEd25519"


class HomeError(AbciAppError):
    """A home directory is missing, incomplete, malformed, or would be overwritten."""


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


# --------------------------------------------------------------------------------------------- genesis


def format_time(time_ns: int) -> str:
    """RFC 3339 with nanoseconds and trailing zeros trimmed, in UTC, as Go's `time.RFC3339Nano` prints it."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        stamp += "." + f"{nanos:09d}".rstrip("0")
    return stamp + "Z"


def parse_time(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 timestamp (any fraction length, `Z` or offset)."""
    body, fraction, offset = text, "", "Z"
    if text.endswith("Z"):
        body = text[:-1]
    elif len(text) > 6 and text[-6] in "+-" and text[-3] == ":":
        body, offset = text[:-6], text[-6:]
    if "." in body:
        body, fraction = body.split(".", 1)
    try:
        moment = datetime.datetime.strptime(body, "%Y-%m-%dT%H:%M:%S")
        if offset == "Z":
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        else:
            moment = datetime.datetime.fromisoformat(body + offset)
        if fraction and (not fraction.isdigit() or len(fraction) > 9):
            raise ValueError(f"bad fraction {fraction!r}")
    except ValueError as exc:
        raise HomeError(f"invalid RFC 3339 time {text!r}: {exc}") from None
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    return int(moment.timestamp()) * 1_000_000_000 + nanos


def default_consensus_params() -> dict:
    """CometBFT v0.38's default consensus params, in genesis JSON form (64-bit integers as strings)."""
    return {
        "block": {"max_bytes": "22020096", "max_gas": "-1"},
        "evidence": {"max_age_num_blocks": "100000", "max_age_duration": "172800000000000", "max_bytes": "1048576"},
        "validator": {"pub_key_types": ["ed25519"]},
        "version": {"app": "0"},
        # Vote extensions stay off: the chain does not use them, so CometBFT never calls ExtendVote.
        "abci": {"vote_extensions_enable_height": "0"},
    }


@dataclass(frozen=True)
class GenesisValidator:
    """A validator both in CometBFT's `validators` list and in the app's staking genesis."""

    pubkey: bytes
    operator: str  # trolly1... account that bonds `stake` from its genesis balance
    stake: int
    moniker: str

    @property
    def power(self) -> int:
        return self.stake // DEFAULT_POWER_REDUCTION


def build_app_state(
    accounts: dict[str, int] | None = None,
    validators: list[GenesisValidator] | tuple[GenesisValidator, ...] = (),
    params: dict | None = None,
) -> dict:
    """The `app_state` object: params, funded accounts, and validators bonded from their operators' balances."""
    params = params if params is not None else {"auth": {"min_fee": 0}, "staking": {"unbonding_blocks": 10}}
    return {
        "params": params,
        "accounts": [{"address": address, "balance": str(balance)} for address, balance in (accounts or {}).items()],
        "validators": [
            {
                "operator": v.operator,
                "pub_key": base64.b64encode(v.pubkey).decode(),
                "stake": str(v.stake),
                "moniker": v.moniker,
            }
            for v in validators
        ],
    }


def build_genesis(
    chain_id: str,
    app_state: dict,
    validators: list[GenesisValidator] | tuple[GenesisValidator, ...] = (),
    genesis_time_ns: int | None = None,
    initial_height: int = 1,
) -> dict:
    """A CometBFT v0.38 genesis document whose `validators` agree with the app's staking genesis."""
    check_chain_id(chain_id)
    if genesis_time_ns is None:
        genesis_time_ns = time.time_ns()
    return {
        "genesis_time": format_time(genesis_time_ns),
        "chain_id": chain_id,
        "initial_height": str(initial_height),
        "consensus_params": default_consensus_params(),
        "validators": [
            {
                "address": hashlib.sha256(v.pubkey).digest()[:20].hex().upper(),
                "pub_key": {"type": PUBKEY_TYPE, "value": base64.b64encode(v.pubkey).decode()},
                "power": str(v.power),
                "name": v.moniker,
            }
            for v in validators
        ],
        "app_hash": "",
        "app_state": app_state,
    }


def dev_genesis(chain_id: str, validator_pubkeys: list[bytes], genesis_time_ns: int | None = None) -> dict:
    """The `trolly-node dev` genesis: `dev_key(0)` funded and operating the (single) validator.

    The same as `localnet_genesis`, whose validator 0 is operated by `dev_key(0)`.
    """
    return localnet_genesis(chain_id, validator_pubkeys, genesis_time_ns)


def localnet_genesis(chain_id: str, validator_pubkeys: list[bytes], genesis_time_ns: int | None = None) -> dict:
    """Genesis for N validators: `dev_key(i)` funded and operating validator i, with `dev_key(0)` funded too."""
    accounts: dict[str, int] = {}
    validators = []
    for index, pubkey in enumerate(validator_pubkeys):
        operator = encode_address(dev_key(index).address)
        accounts[operator] = DEFAULT_DEV_BALANCE
        validators.append(GenesisValidator(pubkey, operator, DEFAULT_VALIDATOR_STAKE, f"validator-{index}"))
    accounts.setdefault(encode_address(dev_key(0).address), DEFAULT_DEV_BALANCE)
    return build_genesis(chain_id, build_app_state(accounts, validators), validators, genesis_time_ns)


def check_chain_id(chain_id: str) -> None:
    """CometBFT limits chain ids to 50 characters; we also refuse whitespace and empty ids."""
    if not chain_id or len(chain_id) > 50 or any(c.isspace() for c in chain_id):
        raise HomeError(f"invalid chain id {chain_id!r}: 1..50 characters, no whitespace")


# ---------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class NodeConfig:
    """The config.toml values that differ between nodes; everything else takes CometBFT's defaults."""

    moniker: str = "trolly-node"
    proxy_app: str = "tcp://127.0.0.1:26658"
    rpc_laddr: str = "tcp://127.0.0.1:26657"
    p2p_laddr: str = "tcp://0.0.0.0:26656"
    persistent_peers: str = ""
    addr_book_strict: bool = True
    allow_duplicate_ip: bool = False
    timeout_commit: str = "1s"
    timeout_propose: str = "3s"
    create_empty_blocks: bool = True
    prometheus_listen_addr: str = ":26660"
    extra: dict[str, Any] = field(default_factory=dict)  # {"section": {"key": value}} overrides


def config_toml(config: NodeConfig) -> dict:
    """The whole CometBFT v0.38 config.toml as a dict (keys and defaults as `cometbft init` writes them)."""
    document: dict[str, Any] = {
        "version": COMETBFT_VERSION,
        "proxy_app": config.proxy_app,
        "moniker": config.moniker,
        "db_backend": "goleveldb",
        "db_dir": "data",
        "log_level": "info",
        "log_format": "plain",
        "genesis_file": "config/genesis.json",
        "priv_validator_key_file": "config/priv_validator_key.json",
        "priv_validator_state_file": "data/priv_validator_state.json",
        "priv_validator_laddr": "",
        "node_key_file": "config/node_key.json",
        "abci": "socket",
        "filter_peers": False,
        "rpc": {
            "laddr": config.rpc_laddr,
            "cors_allowed_origins": [],
            "cors_allowed_methods": ["HEAD", "GET", "POST"],
            "cors_allowed_headers": ["Origin", "Accept", "Content-Type", "X-Requested-With", "X-Server-Time"],
            "grpc_laddr": "",
            "grpc_max_open_connections": 900,
            "unsafe": False,
            "max_open_connections": 900,
            "max_subscription_clients": 100,
            "max_subscriptions_per_client": 5,
            "experimental_subscription_buffer_size": 200,
            "experimental_websocket_write_buffer_size": 200,
            "experimental_close_on_slow_client": False,
            "timeout_broadcast_tx_commit": "10s",
            "max_request_batch_size": 10,
            "max_body_bytes": 1000000,
            "max_header_bytes": 1048576,
            "tls_cert_file": "",
            "tls_key_file": "",
            "pprof_laddr": "",
        },
        "p2p": {
            "laddr": config.p2p_laddr,
            "external_address": "",
            "seeds": "",
            "persistent_peers": config.persistent_peers,
            "addr_book_file": "config/addrbook.json",
            "addr_book_strict": config.addr_book_strict,
            "max_num_inbound_peers": 40,
            "max_num_outbound_peers": 10,
            "unconditional_peer_ids": "",
            "persistent_peers_max_dial_period": "0s",
            "flush_throttle_timeout": "100ms",
            "max_packet_msg_payload_size": 1024,
            "send_rate": 5120000,
            "recv_rate": 5120000,
            "pex": True,
            "seed_mode": False,
            "private_peer_ids": "",
            "allow_duplicate_ip": config.allow_duplicate_ip,
            "handshake_timeout": "20s",
            "dial_timeout": "3s",
        },
        "mempool": {
            "type": "flood",
            "recheck": True,
            "recheck_timeout": "1s",
            "broadcast": True,
            "wal_dir": "",
            "size": 5000,
            "max_txs_bytes": 1073741824,
            "cache_size": 10000,
            "keep-invalid-txs-in-cache": False,
            "max_tx_bytes": 1048576,
            "max_batch_bytes": 0,
            "experimental_max_gossip_connections_to_persistent_peers": 0,
            "experimental_max_gossip_connections_to_non_persistent_peers": 0,
        },
        "statesync": {
            "enable": False,
            "rpc_servers": "",
            "trust_height": 0,
            "trust_hash": "",
            "trust_period": "168h0m0s",
            "discovery_time": "15s",
            "temp_dir": "",
            "chunk_request_timeout": "10s",
            "chunk_fetchers": "4",
        },
        "blocksync": {"version": "v0"},
        "consensus": {
            "wal_file": "data/cs.wal/wal",
            "timeout_propose": config.timeout_propose,
            "timeout_propose_delta": "500ms",
            "timeout_prevote": "1s",
            "timeout_prevote_delta": "500ms",
            "timeout_precommit": "1s",
            "timeout_precommit_delta": "500ms",
            "timeout_commit": config.timeout_commit,
            "double_sign_check_height": 0,
            "skip_timeout_commit": False,
            "create_empty_blocks": config.create_empty_blocks,
            "create_empty_blocks_interval": "0s",
            "peer_gossip_sleep_duration": "100ms",
            "peer_query_maj23_sleep_duration": "2s",
        },
        "storage": {"discard_abci_responses": False},
        "tx_index": {"indexer": "kv", "psql-conn": ""},
        "instrumentation": {
            "prometheus": False,
            "prometheus_listen_addr": config.prometheus_listen_addr,
            "max_open_connections": 3,
            "namespace": "cometbft",
        },
    }
    for section, values in config.extra.items():
        if isinstance(document.get(section), dict):
            document[section].update(values)
        else:
            document[section] = values
    return document


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

    def exists(self) -> bool:
        return self.genesis.exists() or self.priv_validator_key.exists() or self.config.exists()


def _write_file(path: pathlib.Path, text: str, secret: bool = False) -> None:
    """Write via a temporary file and rename, so a crash never leaves a half-written file; secrets are 0600."""
    temporary = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    descriptor = os.open(temporary, flags, 0o600 if secret else 0o644)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


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
        app_state = build_app_state({operator: DEFAULT_VALIDATOR_STAKE}, [validator])
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

    Node i listens on base_port + 10*i (p2p), + 1 (RPC), + 2 (ABCI, the app's `proxy_app`), + 3 (metrics),
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
