"""A member's or validator's own copy of a private task's data key: its box read from the chain, opened, checked.

The requester delivers the key sealed to each recipient's ed25519 account key (`wallet.key_delivery`):
to a member once the task runs, to a validator once it is drawn onto one of the task's committees. The worker
and the verifier read their box at `/market/data_key`, open it with their own key and check what it holds
against the task's commitment (`data_key_hash`, the one definition in `trolly.chain.market.data_keys`). None
while the box is not there: the caller waits (the chain releases a member whose key does not come in time,
without penalty, and a validator owes no vote). A box that does not open, or holds another key, raises
`BadDataKey`; the caller sends `bad_key_report` before the round's deadline and stops working on the task (the
chain then releases a member without penalty, compensated by the requester: docs/privacy.md).
"""

from __future__ import annotations

import nacl.signing

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.market.data_keys import data_key_hash
from trolly.chain.proto.market_pb2 import MsgReportBadKey
from trolly.wallet.box_proofs import prove_box_opening
from trolly.wallet.market_queries import find_data_key
from trolly.wallet.rpc import AsyncRpcClient

from .data.encryption import DataKeyError, open_data_key


class BadDataKey(DataKeyError):
    """The box delivered to this recipient does not open with its key, or holds another key than the task
    committed to: the requester's fault, reported on chain (`bad_key_report`)."""

    def __init__(self, message: str, sealed: bytes, reported: bool) -> None:
        super().__init__(message)
        self.sealed = sealed
        self.reported = reported
        """The chain already accepted this recipient's report on the box."""


async def received_data_key(client: AsyncRpcClient, task_id: int, key: PrivateKey,
                            committed_hash: str) -> bytes | None:
    """Task `task_id`'s data key as delivered to the holder of `key`, None until it is; BadDataKey when the box
    does not open with `key` or its key's hash is not `committed_hash` (hex, the task's `data_key_hash`)."""
    box = await find_data_key(client, task_id, encode_address(key.address))
    if box is None:
        return None
    reported = bool(box.reported_height)
    try:
        data_key = open_data_key(box.sealed_bytes, nacl.signing.SigningKey(key.seed))
    except DataKeyError as error:
        raise BadDataKey(f"task {task_id}: {error}", box.sealed_bytes, reported) from None
    if data_key_hash(data_key).hex() != committed_hash:
        raise BadDataKey(f"task {task_id}: the box holds another key than the one the task committed to",
                         box.sealed_bytes, reported)
    return data_key  # the chain refuses a report on a box like this one, so it was never reported


def bad_key_report(task_id: int, key: PrivateKey, sealed: bytes) -> MsgReportBadKey:
    """The report that the box `sealed` (delivered to the holder of `key`) is bad, with the proof that lets the
    chain open it without `key`'s secret."""
    return MsgReportBadKey(task_id=task_id, proof=prove_box_opening(key.seed, sealed))
