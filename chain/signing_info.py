"""Signing info: which validators sign blocks, what liveness the chain asks of them, and the jail they earn.

Each validator that has appeared in a block's last commit has a `SigningInfo`, keyed by its consensus address
(CometBFT names validators that way in commits): the height its current window started, how many commits it
has been counted in since, how many of the last `signed_blocks_window` of them it was absent from, until when
it is jailed for downtime, and whether it was tombstoned for double-signing (jailed for good). Which of the
last commits it missed is a bit array of `signed_blocks_window` bits, one per commit counted, stored 1024 bits
to a key (`keys.missed_blocks_key`); a chunk with no missed block is deleted, so a validator that signs keeps
none. Everything is in state, so in the app hash.

This file holds the records, the `slashing` params section and the slashing codespace's errors; the rules
that use them live in `modules/downtime.py` (liveness, jailing) and `messages/unjail.py`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

from . import keys
from .codec import decode_u64, encode_u64
from .errors import ChainError, InvalidRequest
from .params import get_params
from .proto import slashing_pb2
from .state import State

CHUNK_BITS = 1024
"""Bits of the missed-blocks array per stored key: a window of 10,000 commits takes 10 keys at most."""

MAX_SIGNED_BLOCKS_WINDOW = 1_000_000
"""Largest window accepted: it bounds a validator's bit array (123 KiB at most) and what a reset deletes."""


@dataclass(frozen=True)
class SlashingParams:
    """Liveness: how much of the recent blocks a validator must sign, and what missing more costs (genesis
    section "slashing", after Cosmos SDK's x/slashing). Durations are counted in blocks, as the unbonding period
    is, except the one that detects a halt: a halt is time without blocks, so only block time can see it."""

    SECTION = "slashing"

    signed_blocks_window: int = 10_000
    """Commits a validator's liveness is judged over: the last this many commits it was part of. A validator is
    judged only once it has been counted in a whole window (after joining the set, unjailing, or a restart)."""

    min_signed_per_window_bps: int = 5_000
    """Share of the window a validator must have signed, in basis points (Cosmos SDK's default, a half). With
    the default window a validator is jailed after missing 5,000 of its last 10,000 commits: hours of downtime at
    one-second blocks, time to restart or move a node, while a dead validator stops holding power the same day."""

    downtime_jail_blocks: int = 600
    """Blocks a validator jailed for downtime stays jailed before its operator may send MsgUnjail (Cosmos SDK's
    ten minutes, at one-second blocks)."""

    slash_fraction_downtime_bps: int = 100
    """Share of stake burned when a validator is jailed for downtime, in basis points (100 = 1%, Cosmos SDK's
    default): far less than for double-signing, since an offline validator endangers liveness, not safety."""

    halt_reset_seconds: int = 300
    """A block whose time is more than this many seconds after the previous block's ends a halt: every
    validator's window starts again at that block, so the misses counted before the halt and the sparse commits
    of the restart jail nobody who signs again within a window. A chain that is not halted never waits this
    long between blocks: rounds that fail because a proposer is offline take seconds each."""

    def __post_init__(self) -> None:
        if not 1 <= self.signed_blocks_window <= MAX_SIGNED_BLOCKS_WINDOW:
            raise InvalidRequest(f"slashing.signed_blocks_window must be in 1..{MAX_SIGNED_BLOCKS_WINDOW}")
        if not 0 <= self.min_signed_per_window_bps <= 10_000:
            raise InvalidRequest("slashing.min_signed_per_window_bps must be in 0..10000")
        if self.downtime_jail_blocks < 1:
            raise InvalidRequest("slashing.downtime_jail_blocks must be at least 1")
        if not 0 <= self.slash_fraction_downtime_bps <= 10_000:
            raise InvalidRequest("slashing.slash_fraction_downtime_bps must be in 0..10000")
        if self.halt_reset_seconds < 1:
            raise InvalidRequest("slashing.halt_reset_seconds must be at least 1")

    @property
    def max_missed_blocks(self) -> int:
        """Most commits of a window a validator may miss; one more jails it."""
        return self.signed_blocks_window - self.signed_blocks_window * self.min_signed_per_window_bps // 10_000


def slashing_params(state: State) -> SlashingParams:
    return get_params(state, SlashingParams)


# -- errors (codespace "slashing") ------------------------------------------------------------------------------
class SlashingError(ChainError):
    """A slashing operation failed."""

    codespace = "slashing"
    code = 1


class ValidatorNotJailed(SlashingError):
    """The signer's validator is not jailed: there is nothing to unjail."""

    code = 2


class JailTimeRemains(SlashingError):
    """The validator's jail time for downtime has not passed yet."""

    code = 3


class ValidatorTombstoned(SlashingError):
    """The validator double-signed: it is jailed for good and can never be unjailed."""

    code = 4


class SelfStakeTooLowToUnjail(SlashingError):
    """The validator's stake is below the minimum self-stake: bond more before unjailing."""

    code = 5


# -- the record -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SigningInfo:
    consensus_address: bytes
    start_height: int
    index_offset: int = 0
    """Commits counted since `start_height`; the next one's bit is `index_offset % signed_blocks_window`."""
    missed_blocks_counter: int = 0
    """Set bits of the missed-blocks array (an invariant checks it)."""
    jailed_until: int = 0
    """First height at which MsgUnjail is accepted; 0 when never jailed for downtime."""
    tombstoned: bool = False


def encode_signing_info(info: SigningInfo) -> bytes:
    return slashing_pb2.ValidatorSigningInfo(
        consensus_address=info.consensus_address,
        start_height=info.start_height,
        index_offset=info.index_offset,
        missed_blocks_counter=info.missed_blocks_counter,
        jailed_until=info.jailed_until,
        tombstoned=info.tombstoned,
    ).SerializeToString(deterministic=True)


def decode_signing_info(raw: bytes) -> SigningInfo:
    record = slashing_pb2.ValidatorSigningInfo.FromString(raw)
    return SigningInfo(record.consensus_address, record.start_height, record.index_offset,
                       record.missed_blocks_counter, record.jailed_until, record.tombstoned)


def get_signing_info(state: State, consensus_address: bytes) -> SigningInfo | None:
    raw = state.get(keys.signing_info_key(consensus_address))
    return None if raw is None else decode_signing_info(raw)


def save_signing_info(state: State, info: SigningInfo) -> None:
    state.set(keys.signing_info_key(info.consensus_address), encode_signing_info(info))


def iterate_signing_infos(state: State) -> Iterator[SigningInfo]:
    """Every signing info, ascending by consensus address."""
    for _, raw in state.iterate(keys.SIGNING_INFO):
        yield decode_signing_info(raw)


def fresh_window(state: State, info: SigningInfo, height: int) -> SigningInfo:
    """`info` with a new window starting at `height`: no commit counted, no miss kept. Jail and tombstone stay."""
    clear_missed_blocks(state, info.consensus_address)
    return dataclasses.replace(info, start_height=height, index_offset=0, missed_blocks_counter=0)


# -- the missed-blocks bit array ---------------------------------------------------------------------------------
def _chunk(state: State, consensus_address: bytes, chunk: int) -> bytearray:
    raw = state.get(keys.missed_blocks_key(consensus_address, chunk))
    return bytearray(CHUNK_BITS // 8) if raw is None else bytearray(raw)


def missed_block(state: State, consensus_address: bytes, index: int) -> bool:
    """Whether bit `index` of the validator's window is set (it missed that commit)."""
    byte, bit = divmod(index % CHUNK_BITS, 8)
    return bool(_chunk(state, consensus_address, index // CHUNK_BITS)[byte] >> bit & 1)


def set_missed_block(state: State, consensus_address: bytes, index: int, missed: bool) -> None:
    """Set or clear bit `index`; a chunk left all zero is deleted rather than stored."""
    chunk = _chunk(state, consensus_address, index // CHUNK_BITS)
    byte, bit = divmod(index % CHUNK_BITS, 8)
    chunk[byte] = chunk[byte] | (1 << bit) if missed else chunk[byte] & ~(1 << bit)
    key = keys.missed_blocks_key(consensus_address, index // CHUNK_BITS)
    if any(chunk):
        state.set(key, bytes(chunk))
    else:
        state.delete(key)


def clear_missed_blocks(state: State, consensus_address: bytes) -> None:
    stored = [key for key, _ in state.iterate(keys.MISSED_BLOCKS + consensus_address)]
    for key in stored:
        state.delete(key)


def count_missed_blocks(state: State, consensus_address: bytes) -> int:
    """Set bits over every stored chunk of the validator's array."""
    chunks = state.iterate(keys.MISSED_BLOCKS + consensus_address)
    return sum(int.from_bytes(raw, "big").bit_count() for _, raw in chunks)


# -- the clock that detects halts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LivenessClock:
    """What the previous tracked block left: its time, and the window its commits were counted under."""

    time_ns: int
    signed_blocks_window: int


def get_liveness_clock(state: State) -> LivenessClock | None:
    raw = state.get(keys.LIVENESS_CLOCK)
    return None if raw is None else LivenessClock(decode_u64(raw[:8]), decode_u64(raw[8:]))


def set_liveness_clock(state: State, clock: LivenessClock) -> None:
    state.set(keys.LIVENESS_CLOCK, encode_u64(clock.time_ns) + encode_u64(clock.signed_blocks_window))
