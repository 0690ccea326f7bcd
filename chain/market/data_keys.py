"""A private task's data key, sealed to each recipient: the named verbs over state, and when the task may start.

The chain never sees the key: it holds one sealed box per recipient (`SEALED_KEY_BYTES`, an X25519 sealed box
to the recipient's ed25519 key, which only that key opens), under `keys.market_data_key_key`. Recipients are
the task's members (at most `workers_wanted`) and validators' operators (at most `max_validators`); a second
delivery to the same recipient replaces the first, so a task holds at most that many boxes, and they are
deleted when the task ends.

A private task starts only when every member and every bonded validator holds its box: a worker locks its
collateral at join but trains nothing before the task starts, so one whose key the requester withholds is
never in a round it could miss; the task expires at its join deadline and the collateral comes back.
"""

from __future__ import annotations

from .. import keys
from ..state import State
from ..validators import active_validators
from .records import Task

SEALED_KEY_BYTES = 80
"""A sealed data key: the 32-byte key, the sender's ephemeral X25519 public key (32) and a Poly1305 tag (16)."""


def put_sealed_key(state: State, task_id: int, recipient: bytes, sealed: bytes) -> None:
    state.set(keys.market_data_key_key(task_id, recipient), sealed)


def find_sealed_key(state: State, task_id: int, recipient: bytes) -> bytes | None:
    return state.get(keys.market_data_key_key(task_id, recipient))


def delete_sealed_key(state: State, task_id: int, recipient: bytes) -> None:
    state.delete(keys.market_data_key_key(task_id, recipient))


def delete_sealed_keys(state: State, task_id: int) -> None:
    prefix = keys.MARKET_DATA_KEY + keys.u64(task_id)
    for key in [key for key, _ in state.iterate(prefix)]:
        state.delete(key)


def key_recipients(state: State, task: Task) -> list[bytes]:
    """Who must hold a private task's key before it starts: its members, then the bonded validators' operators."""
    return list(task.members) + [validator.operator for validator in active_validators(state)]


def ready_to_start(state: State, task: Task) -> bool:
    """All wanted workers joined, and for a private task every key recipient holds its sealed key."""
    if len(task.members) != task.workers_wanted:
        return False
    if not task.private_data:
        return True
    return all(find_sealed_key(state, task.id, recipient) is not None for recipient in key_recipients(state, task))
