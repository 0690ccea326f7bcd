"""A member's or validator's own copy of a private task's data key: its box read from the chain and opened.

The requester delivers the key sealed to each recipient's ed25519 account key (`compute.requester.key_delivery`);
the worker (after it joins) and the verifier (before it replays) read their box at `/market/data_key` and open
it with their own key. None while the box is not there: nobody is at fault, the caller waits (a worker: the
task does not start before its key is delivered) or votes nothing (a verifier).
"""

from __future__ import annotations

import nacl.signing

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.wallet.market_queries import find_data_key
from trolly.wallet.rpc import AsyncRpcClient

from .data.encryption import open_data_key


async def received_data_key(client: AsyncRpcClient, task_id: int, key: PrivateKey) -> bytes | None:
    """Task `task_id`'s data key as delivered to the holder of `key`, None until it is; DataKeyError when the
    box does not open with `key` (the requester sealed it to another key)."""
    box = await find_data_key(client, task_id, encode_address(key.address))
    if box is None:
        return None
    return open_data_key(box.sealed_bytes, nacl.signing.SigningKey(key.seed))
