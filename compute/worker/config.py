"""The worker's home directory and its configuration file.

    <home>/worker.json          WorkerConfig (written by `trolly-worker init`, read by `start`)
    <home>/state.json           progress of tasks and rounds (`progress.py`)
    <home>/blobs/               the content-addressed blob store the blob service serves
    <home>/nonces.json          recently used nonces (the wallet's NonceCache)
    <home>/keyring-<backend>/   the key, unless `wallet_home` points at another wallet home

The home defaults to `$TROLLY_WORKER_HOME`, else `~/.trolly-worker`, so tests and localnets stay hermetic.

This module loads no torch: the two checks that need it import it when they run, so that a reader of a worker
home that trains nothing (the console's Provide compute page) stays light.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import TYPE_CHECKING

from trolly.chain.errors import ChainError
from trolly.chain.market.urls import check_blob_url, check_relay_url
from trolly.wallet.files import ensure_private_directory, write_private_file

from .errors import WorkerHomeError

if TYPE_CHECKING:
    from ..acceleration import AccelerationOptions

HOME_ENVIRONMENT_VARIABLE = "TROLLY_WORKER_HOME"
DEFAULT_HOME = "~/.trolly-worker"
CONFIG_FILE = "worker.json"
CONFIG_VERSION = 1


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What `init` fixes for a worker; `start` options may override the run-time ones."""

    key_name: str
    keyring_backend: str = "file"
    wallet_home: str = ""
    """Wallet home holding the keyring; empty means the worker home itself."""
    node: str = "http://127.0.0.1:26657"
    blob_host: str = "127.0.0.1"
    blob_port: int = 0
    """Port of the blob service; fixed at init, because the URL is registered on chain."""
    public_url: str = ""
    """The blob service's URL as others reach it (behind NAT, a proxy...); empty: http://blob_host:blob_port."""
    relay: str = ""
    """A blob relay's URL: this worker (with no inbound route) pushes its blobs there and serves none itself;
    the relay is what the chain records and fetchers use (`compute.blobs.relay_push`). Empty: serve them."""
    stake: int = 0
    """utrl staked when registering; 0 means the chain's `min_worker_stake`."""
    fee: int = 0
    """utrl fee paid per transaction; 0 means the chain's minimum for each (`min_fee + fee_per_byte x size`)."""
    allow_private_blob_hosts: bool = False
    """Fetch blobs (datasets, peers' updates) from loopback, private and link-local addresses too. Off by default:
    blob URLs come from strangers (compute/blobs/connect_policy.py). A localnet, whose blob services listen on
    127.0.0.1, turns it on. Cloud metadata addresses stay refused."""
    checkpoint_process: bool = True
    """Copy, hash and store checkpoints in a helper process (`compute.acceleration.checkpoint_process`); false: in
    threads of the worker. The same bytes either way."""
    training_core: bool = True
    """Give the training thread a CPU to itself during a round (`compute.acceleration.affinity`); false: leave every
    thread to the scheduler. The same bytes either way."""
    device: str = ""
    """Where the trainer runs: cpu, cuda or cuda:N; empty: CUDA where a GPU is present, else the CPU
    (`compute.devices.training_device`)."""
    memory_limit_mb: int = 0
    """Declare at most this much memory (MiB) on chain; 0: what `preflight.measure` finds. It can only lower the
    measurement, never raise it."""

    def __post_init__(self) -> None:
        for name in ("blob_port", "stake", "fee", "memory_limit_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise WorkerHomeError(f"{name} must be a non-negative integer, got {value!r}")
        if self.blob_port > 65535:
            raise WorkerHomeError(f"blob_port must be at most 65535, got {self.blob_port}")
        if not self.key_name:
            raise WorkerHomeError("a key name is required")
        for name in ("allow_private_blob_hosts", "checkpoint_process", "training_core"):
            if not isinstance(getattr(self, name), bool):
                raise WorkerHomeError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.device:
            from ..devices import is_device_name  # torch: loaded only where a device is named

            if not is_device_name(self.device):
                raise WorkerHomeError(f"device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.public_url:
            try:
                check_blob_url(self.public_url.rstrip("/") or self.public_url)
            except ChainError as error:
                raise WorkerHomeError(f"the public URL {self.public_url!r} cannot be registered: {error}") from None
        if self.relay:
            try:
                check_relay_url(self.relay)
            except ChainError as error:
                raise WorkerHomeError(f"the relay {self.relay!r} cannot be registered: {error}") from None

    @property
    def acceleration(self) -> AccelerationOptions:
        """The options of the worker's `compute.acceleration.Acceleration`."""
        from ..acceleration import AccelerationOptions

        return AccelerationOptions(checkpoint_process=self.checkpoint_process, training_core=self.training_core)

    @property
    def blob_url(self) -> str:
        """The URL registered on chain."""
        return self.public_url.rstrip("/") or f"http://{self.blob_host}:{self.blob_port}"


def resolve_home(home: str | os.PathLike | None) -> pathlib.Path:
    if home is None:
        home = os.environ.get(HOME_ENVIRONMENT_VARIABLE) or DEFAULT_HOME
    return pathlib.Path(home).expanduser()


def wallet_home(home: pathlib.Path, config: WorkerConfig) -> pathlib.Path:
    return pathlib.Path(config.wallet_home).expanduser() if config.wallet_home else home


def save_config(home: pathlib.Path, config: WorkerConfig) -> pathlib.Path:
    ensure_private_directory(home)
    path = home / CONFIG_FILE
    document = {"version": CONFIG_VERSION, **dataclasses.asdict(config)}
    write_private_file(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())
    return path


def load_config(home: pathlib.Path) -> WorkerConfig:
    path = home / CONFIG_FILE
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise WorkerHomeError(f"{home} is not a worker home (no {CONFIG_FILE}); run `trolly-worker init` first") from None
    except (OSError, ValueError) as error:
        raise WorkerHomeError(f"cannot read {path}: {error}") from None
    if not isinstance(document, dict) or document.pop("version", None) != CONFIG_VERSION:
        raise WorkerHomeError(f"{path} is not a version {CONFIG_VERSION} worker configuration")
    known = {field.name for field in dataclasses.fields(WorkerConfig)}
    unknown = sorted(set(document) - known)
    if unknown:
        raise WorkerHomeError(f"{path} has unknown field(s) {', '.join(unknown)}")
    try:
        return WorkerConfig(**document)
    except TypeError as error:
        raise WorkerHomeError(f"{path} is incomplete: {error}") from None
