"""What a block brings into the state machine (`BlockEnv`) and what comes out (`BlockOutput`).

`BlockEnv` carries only data from the block itself (height, time, proposer, hash, the last commit's votes,
misbehavior evidence), so executing a block is a pure function of (committed state, block).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class VoteInfo:
    """A validator of the last commit: its consensus address, power, and whether it signed."""

    validator_address: bytes
    power: int
    signed_last_block: bool


@dataclass(frozen=True)
class Misbehavior:
    """Evidence from CometBFT (FinalizeBlock.misbehavior): kind 1 duplicate vote, 2 light client attack."""

    kind: int
    validator_address: bytes
    power: int
    height: int
    time_ns: int
    total_voting_power: int


@dataclass(frozen=True)
class BlockEnv:
    chain_id: str
    height: int
    time_ns: int
    proposer_address: bytes = b""
    block_hash: bytes = b""
    last_commit: tuple[VoteInfo, ...] = ()
    misbehavior: tuple[Misbehavior, ...] = ()
    sampling_seed: bytes = b""
    """The seed proven by the block's vote-extension signatures (docs/protocol.md 4.3); empty when the block
    carries none, and the market then samples from `block_hash`."""


@dataclass(frozen=True)
class Event:
    """An ABCI event: a type and ordered (key, value) attributes, all strings. All attributes are indexed."""

    type: str
    attributes: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(type_: str, **attributes: object) -> "Event":
        return Event(type_, tuple([(k, v if type(v) is str else str(v)) for k, v in attributes.items()]))


@dataclass(frozen=True)
class ValidatorUpdate:
    """A power change for CometBFT: ed25519 consensus public key and new power (0 removes)."""

    pubkey: bytes
    power: int


@dataclass
class TxResult:
    code: int = 0
    codespace: str = ""
    log: str = ""
    data: bytes = b""
    events: list[Event] = field(default_factory=list)
    gas_wanted: int = 0
    gas_used: int = 0

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass
class BlockContext:
    """Mutable per-block scratch space handed to modules: the env plus what they emit."""

    env: BlockEnv
    events: list[Event] = field(default_factory=list)
    validator_updates: dict[bytes, int] = field(default_factory=dict)  # consensus pubkey -> power
    tx_events: list[Event] | None = None  # events of the tx being executed, None outside a tx
    auth_params: object | None = None  # AuthParams, read once per block by the first transaction (app.apply_tx)
    decoded: dict[bytes, tuple[bytes, object]] = field(default_factory=dict)
    """Records decoded in this block, by state key, each with the bytes it was decoded from: a handler that
    only reads a record many transactions read (a task for each of its members) decodes it once per block.
    A hit needs the key's current bytes to equal those, so a write or a rollback is never missed."""
    record_events: bool = True
    """False where nothing reads the events (CheckTx, PrepareProposal's trial run: their answers carry none):
    `emit` drops them, and hot handlers skip building them. Results and state are the same either way."""

    def emit(self, event: Event) -> None:
        if self.record_events:
            (self.tx_events if self.tx_events is not None else self.events).append(event)

    def update_validator(self, pubkey: bytes, power: int) -> None:
        self.validator_updates[pubkey] = power


@dataclass
class BlockOutput:
    tx_results: list[TxResult]
    events: list[Event]
    validator_updates: list[ValidatorUpdate]
