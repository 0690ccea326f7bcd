"""The round's aggregation check: the next round's start weights must be the deterministic aggregate.

W_{r+1} = outer Nesterov step over the decoded updates of the workers whose round r passed verification,
weighted by samples processed (docs/protocol.md section 2, `compute.rounds.outer_step`, bit for bit the same
in every process). A verifier recomputes it from the updates (fetched by their committed hash) and compares
its hash with what round r + 1's workers say they started from. A worker that starts round r + 1 from
anything else (stale weights, its own update only, weights it likes better) fails each of its sampled
segments of round r + 1 with the reason; when the updates cannot be fetched the verifier falls back to the
chain's agreed start hash (the one most workers reported) and says so.

`GlobalWeights` carries (W_r, outer momentum) of a task from round to round and persists each round's state
under the verifier's home, so a restart does not refetch a task's history.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from collections.abc import Awaitable, Callable, Sequence

from trolly.compute.codecs import get_codec
from trolly.compute.errors import ComputeError
from trolly.compute.rounds import GlobalState, WorkerUpdate, outer_step
from trolly.compute.spec import TaskSpec
from trolly.wallet.files import write_atomically

from .errors import WorkUnavailable


@dataclasses.dataclass(frozen=True)
class PassedUpdate:
    """One worker's verified update of a round, as committed: where to fetch it and what it weighs."""

    worker_index: int
    samples_processed: int
    update_hash: bytes
    blob_url: str


@dataclasses.dataclass(frozen=True)
class AggregationReport:
    round: int  # the round whose start weights were checked (r + 1)
    expected_hash: bytes
    claimed_hash: bytes
    matches: bool
    reason: str

    def to_json(self) -> dict:
        return {"round": self.round, "expected_hash": self.expected_hash.hex(), "claimed_hash": self.claimed_hash.hex(),
                "matches": self.matches, "reason": self.reason}


def aggregate(previous: GlobalState, encoded_updates: Sequence[tuple[int, int, bytes]], spec: TaskSpec) -> GlobalState:
    """W_{r+1} from W_r and the passed updates given as (worker index, samples processed, encoded bytes)."""
    codec = get_codec(spec.codec)
    updates = [WorkerUpdate(index, samples, codec.decode(data)) for index, samples, data in encoded_updates]
    return outer_step(previous, updates, spec.training.outer_optimizer)


def check_aggregation(previous: GlobalState, encoded_updates: Sequence[tuple[int, int, bytes]], spec: TaskSpec,
                      claimed_next_hash: bytes) -> AggregationReport:
    """Compare the claimed hash of W_{r+1} with the aggregate recomputed here."""
    try:
        expected = aggregate(previous, encoded_updates, spec).weights_hash()
    except ComputeError as error:
        return AggregationReport(previous.round + 1, b"", claimed_next_hash, False, f"updates do not aggregate: {error}")
    matches = expected == claimed_next_hash
    reason = ("start weights are the deterministic aggregate" if matches else
              f"start weights {claimed_next_hash.hex()[:16]}... are not the aggregate {expected.hex()[:16]}...")
    return AggregationReport(previous.round + 1, expected, claimed_next_hash, matches, reason)


Fetch = Callable[[PassedUpdate], Awaitable[bytes]]


class GlobalWeights:
    """(W_r, momentum) of one task, computed round after round and cached on disk."""

    def __init__(self, spec: TaskSpec, initial: dict, directory: pathlib.Path | None = None) -> None:
        self.spec = spec
        self.directory = directory
        self._states: dict[int, GlobalState] = {0: GlobalState.initial(initial)}

    def _path(self, round_index: int) -> pathlib.Path | None:
        return None if self.directory is None else self.directory / f"round-{round_index}.state"

    def known(self, round_index: int) -> GlobalState | None:
        state = self._states.get(round_index)
        path = self._path(round_index)
        if state is None and path is not None and path.exists():
            data = path.read_bytes()
            try:
                state = GlobalState.decode(data)
            except ComputeError:
                path.unlink()  # a damaged cache entry is recomputed, never trusted
                return None
            self._states[round_index] = state
        return state

    def _remember(self, state: GlobalState) -> None:
        self._states[state.round] = state
        path = self._path(state.round)
        if path is not None:
            write_atomically(path, state.encode())

    async def weights_for(self, round_index: int, passed: Callable[[int], Sequence[PassedUpdate]], fetch: Fetch) -> GlobalState:
        """W_round, computing the missing rounds from `passed(r)` (round r's verified updates) and `fetch`.

        Raises WorkUnavailable when an update cannot be fetched or does not hash to its commitment."""
        start = max(r for r in range(round_index + 1) if self.known(r) is not None)
        state = self.known(start)
        for r in range(start, round_index):
            encoded = []
            for update in sorted(passed(r), key=lambda u: u.worker_index):
                data = await fetch(update)
                if hashlib.sha256(data).digest() != update.update_hash:
                    raise WorkUnavailable(f"update of worker {update.worker_index} in round {r} does not match its hash")
                encoded.append((update.worker_index, update.samples_processed, data))
            try:
                state = aggregate(state, encoded, self.spec) if encoded else outer_step(state, [], self.spec.training.outer_optimizer)
            except ComputeError as error:
                raise WorkUnavailable(f"round {r}'s updates do not aggregate: {error}") from None
            self._remember(state)
        return state
