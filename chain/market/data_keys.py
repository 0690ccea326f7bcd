"""A private task's data key: the task's commitment to it, the boxes that carry it, and who was drawn to get one.

The chain never sees the key. A private `MsgSubmitTask` commits to it with `data_key_hash` (sha256 over
`DATA_KEY_HASH_TAG` and the 32-byte key: `data_key_hash`, the one definition the requester side uses too), and
no two tasks may commit to the same key (`claim_data_key_hash`, an index kept forever): every task has a key of
its own, so collecting one task's key never opens another task's data.

The key reaches each recipient in a `KeyBox`: an X25519 sealed box (`SEALED_KEY_BYTES`) to the recipient's
ed25519 key, under `keys.market_data_key_key`, delivered once, with the sender's proof that it knows the box's
ephemeral secret (`box_sender_proofs`, bound to `box_context`): a recipient's report on a bad box reveals the
box's Diffie-Hellman secret, which must be one the sender already held, or a requester could make a box from
another task's ephemeral key and read that task's key from an honest report. Recipients are the started task's active members
and the validators' operators drawn onto a committee of one of its sampled segments (`note_drawn`, escalations
included: at most `max_validators` of them), so a task holds at most 2 x `workers_wanted` + `max_validators`
boxes; they and the draw index are deleted when the task ends (`delete_task_keys`). Who may be delivered a box,
and what a bad or missing one costs whom, is in `messages.deliver_key` and `market.key_faults`.
"""

from __future__ import annotations

import hashlib

from .. import keys
from ..state import State
from .errors import DataKeyReused
from .records import KeyBox, decode_record, encode_record

SEALED_KEY_BYTES = 80
"""A sealed data key: the 32-byte key, the sender's ephemeral X25519 public key (32) and a Poly1305 tag (16)."""
DATA_KEY_BYTES = 32
DATA_KEY_HASH_TAG = b"trolly/data-key/v1"
"""Domain tag of a data key's hash, so that it is never the hash of anything else the protocol hashes."""
BOX_CONTEXT_TAG = b"trolly/data-key-box/v1"
"""Domain tag of the context a box's sender proof is bound to (`box_context`)."""


def data_key_hash(data_key: bytes) -> bytes:
    """The commitment a private task makes to its data key: sha256(DATA_KEY_HASH_TAG || key)."""
    return hashlib.sha256(DATA_KEY_HASH_TAG + data_key).digest()


def box_context(task_id: int) -> bytes:
    """What a box's sender proof (`box_sender_proofs`) is bound to besides the box and its recipient: the task, so
    a proof made for one task's box is not accepted with the same box in another."""
    return BOX_CONTEXT_TAG + keys.u64(task_id)


def claim_data_key_hash(state: State, key_hash: bytes, task_id: int) -> None:
    """Record that task `task_id` commits to `key_hash`; DataKeyReused when an earlier task did."""
    index = keys.market_data_key_hash_key(key_hash)
    earlier = state.get(index)
    if earlier is not None:
        raise DataKeyReused(f"task {int.from_bytes(earlier, 'big')} already committed to this data key: draw a "
                            f"fresh key for every task (re-pack, or submit again with --data, which re-encrypts)")
    state.set(index, keys.u64(task_id))


def put_key_box(state: State, task_id: int, recipient: bytes, box: KeyBox) -> None:
    state.set(keys.market_data_key_key(task_id, recipient), encode_record(box))


def find_key_box(state: State, task_id: int, recipient: bytes) -> KeyBox | None:
    raw = state.get(keys.market_data_key_key(task_id, recipient))
    return None if raw is None else decode_record(KeyBox, raw)


def note_drawn(state: State, task_id: int, operator: bytes, height: int) -> None:
    """Record that `operator` sits on a committee of task `task_id`, drawn at `height` (the first draw counts)."""
    index = keys.market_key_drawn_key(task_id, operator)
    if state.get(index) is None:
        state.set(index, keys.u64(height))


def drawn_height(state: State, task_id: int, operator: bytes) -> int | None:
    """The height at which `operator` was first drawn onto a committee of the task, None if never."""
    raw = state.get(keys.market_key_drawn_key(task_id, operator))
    return None if raw is None else int.from_bytes(raw, "big")


def drawn_operators(state: State, task_id: int) -> list[tuple[bytes, int]]:
    """(operator, first draw height) of every validator drawn for the task, ascending by operator."""
    prefix = keys.MARKET_KEY_DRAWN + keys.u64(task_id)
    return [(key[len(prefix):], int.from_bytes(value, "big")) for key, value in state.iterate(prefix)]


def delete_task_keys(state: State, task_id: int) -> None:
    """Forget an ended task's boxes and draws (its key hash stays claimed for ever)."""
    for prefix in (keys.MARKET_DATA_KEY + keys.u64(task_id), keys.MARKET_KEY_DRAWN + keys.u64(task_id)):
        for key in [key for key, _ in state.iterate(prefix)]:
            state.delete(key)
