"""The worker's persisted progress: what it has trained, published and committed, per task and round.

A worker can be killed at any instant. Everything it needs to carry on is in `<home>/state.json`, written
atomically (temporary file, fsync, rename) after each step that matters, and in the blob store, which is
written before the state that names a blob (so the state never points at a missing blob):

    task joined           worker index, spec hash
    global weights        per round r, the blob of W_r and the outer momentum (`GlobalState.encode()`)
    checkpoint j stored   its hash appended to the round's list: a restart resumes from the last one
    update encoded        the update's hash and the error-feedback residual's (blobs stored first)
    commit signed         the signed transaction bytes, BEFORE they are broadcast
    commit included       `committed`

The signed commit is kept so that a restart re-broadcasts the very same bytes (same nonce, same content)
instead of signing a second commitment: together with the chain's own one-commitment-per-round rule, a
worker never commits twice, and never sends two different commitments for one round.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading

from trolly.wallet.files import write_private_file

from .errors import WorkerHomeError

STATE_FILE = "state.json"
STATE_VERSION = 1

# Task progress status.
JOINED, FINISHED = "joined", "finished"


@dataclasses.dataclass
class RoundProgress:
    round: int
    steps: int = 0
    start_weights_hash: str = ""
    checkpoints: list[str] = dataclasses.field(default_factory=list)
    """Hex hashes of checkpoints 0..j stored so far, in order."""
    update_hash: str = ""
    residual_hash: str = ""
    """Blob of the error-feedback residual left after encoding this round's update."""
    commit_tx: str = ""
    """Hex of the signed CommitRound transaction, saved before it is broadcast."""
    committed: bool = False

    def to_json_text(self) -> str:
        """This round as JSON text, kept until a field changes: a worker saves its state at every checkpoint,
        and re-encoding every round of a long task each time grows with the task's rounds, held under the
        GIL beside the training thread."""
        key = tuple(tuple(value) if isinstance(value, list) else value
                    for value in (getattr(self, name) for name in _ROUND_FIELDS))
        cached = self.__dict__.get("_text")
        if cached is None or cached[0] != key:
            text = json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))
            cached = self.__dict__["_text"] = (key, text)
        return cached[1]


_ROUND_FIELDS = tuple(field.name for field in dataclasses.fields(RoundProgress))


@dataclasses.dataclass
class TaskProgress:
    task_id: int
    spec_hash: str
    worker_index: int
    status: str = JOINED
    outcome: str = ""
    """Why the worker is done with the task: the task's end status, or dropped/slashed."""
    global_states: dict[int, str] = dataclasses.field(default_factory=dict)
    """round r -> blob hash of GlobalState r (W_r and the outer momentum)."""
    rounds: dict[int, RoundProgress] = dataclasses.field(default_factory=dict)
    final_weights_hash: str = ""

    def round(self, index: int) -> RoundProgress:
        """The progress of round `index`, created empty when first asked for."""
        if index not in self.rounds:
            self.rounds[index] = RoundProgress(index)
        return self.rounds[index]

    def to_json(self) -> dict:
        document = dataclasses.asdict(self)
        document["global_states"] = {str(r): h for r, h in sorted(self.global_states.items())}
        document["rounds"] = {str(r): dataclasses.asdict(p) for r, p in sorted(self.rounds.items())}
        return document

    def to_json_text(self) -> str:
        """`to_json()` as compact JSON text, each round's part from its cache (`RoundProgress.to_json_text`)."""
        head = {"task_id": self.task_id, "spec_hash": self.spec_hash, "worker_index": self.worker_index,
                "status": self.status, "outcome": self.outcome, "final_weights_hash": self.final_weights_hash,
                "global_states": {str(r): h for r, h in sorted(self.global_states.items())}}
        rounds = ",".join(f'"{r}":{p.to_json_text()}' for r, p in sorted(self.rounds.items()))
        return json.dumps(head, sort_keys=True, separators=(",", ":"))[:-1] + ',"rounds":{' + rounds + "}}"

    @classmethod
    def from_json(cls, document: dict) -> "TaskProgress":
        fields = dict(document)
        fields["global_states"] = {int(r): h for r, h in fields.get("global_states", {}).items()}
        fields["rounds"] = {int(r): RoundProgress(**p) for r, p in fields.get("rounds", {}).items()}
        return cls(**fields)


class WorkerState:
    """All tasks' progress, loaded from and saved to `<home>/state.json`. Thread-safe `save()`: the
    checkpoint hasher records progress from its own thread."""

    def __init__(self, path: pathlib.Path, tasks: dict[int, TaskProgress] | None = None) -> None:
        self.path = path
        self.tasks: dict[int, TaskProgress] = tasks or {}
        self._lock = threading.RLock()

    @classmethod
    def load(cls, home: pathlib.Path) -> "WorkerState":
        path = home / STATE_FILE
        try:
            document = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as error:
            raise WorkerHomeError(f"cannot read the worker state {path}: {error}") from None
        if not isinstance(document, dict) or document.get("version") != STATE_VERSION:
            raise WorkerHomeError(f"{path} is not a version {STATE_VERSION} worker state")
        try:
            tasks = {int(t): TaskProgress.from_json(p) for t, p in document.get("tasks", {}).items()}
        except (TypeError, ValueError, AttributeError) as error:
            raise WorkerHomeError(f"{path} is malformed: {error}") from None
        return cls(path, tasks)

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def save(self) -> None:
        with self._lock:
            tasks = ",".join(f'"{t}":{p.to_json_text()}' for t, p in sorted(self.tasks.items()))
            text = f'{{"tasks":{{{tasks}}},"version":{STATE_VERSION}}}\n'
            write_private_file(self.path, text.encode())

    def task(self, task_id: int) -> TaskProgress | None:
        return self.tasks.get(task_id)

    def add_task(self, task_id: int, spec_hash: str, worker_index: int) -> TaskProgress:
        with self._lock:
            progress = self.tasks.get(task_id)
            if progress is None:
                progress = self.tasks[task_id] = TaskProgress(task_id, spec_hash, worker_index)
                self.save()
            return progress

    def active_tasks(self) -> list[TaskProgress]:
        return [p for _, p in sorted(self.tasks.items()) if p.status == JOINED]

    def finished_count(self) -> int:
        return sum(1 for p in self.tasks.values() if p.status == FINISHED)

    def finish_task(self, task_id: int, outcome: str) -> None:
        with self._lock:
            progress = self.tasks[task_id]
            progress.status = FINISHED
            progress.outcome = outcome
            self.save()
