"""The worker's side of a blob relay: push a round's blobs and listing over an outbound connection, signed.

    pusher = RelayPusher("https://relay.example", key, store)
    await pusher.push_round(task_id, round_index, checkpoints, [update_hash, residual_hash])
    await pusher.push_blobs(task_id, rounds, [final_weights_hash])       # in the final report's round

Each push is signed with the worker's key (`relay_auth.sign_push`) for this relay's URL (the one the worker
registered) and the task's round it belongs to, afresh for every attempt, so a retry after a lost answer is not
refused as stale. Connection failures, timeouts and 5xx are retried with backoff
(`RetryPolicy`) and end in `BlobUnavailable`; a refusal (401, 403, 413, 507...) raises `BlobRejected` (or
`BlobTooLarge`) with the relay's reason, at once. The relay is the worker's own choice, not a stranger's URL,
so no address policy applies to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterable, Sequence

import aiohttp

from trolly.chain.crypto import PrivateKey, encode_address

from .client import RetryPolicy
from .errors import BlobRejected, BlobTooLarge, BlobUnavailable
from .relay_auth import relay_identity, sign_push
from .store import BlobStore


class RelayPusher:
    def __init__(self, relay_url: str, key: PrivateKey, store: BlobStore, retry: RetryPolicy = RetryPolicy()) -> None:
        self.relay_url = relay_url.rstrip("/")
        self.relay = relay_identity(relay_url)
        """What each push is signed for: the relay's URL in its one compared form."""
        self.key = key
        self.store = store
        self.retry = retry
        self.worker = encode_address(key.address)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.retry.request_timeout))
        return self._session

    async def _put(self, path: str, body: bytes, task_id: int, round_index: int, resource: str,
                   content_hash: str) -> int:
        """PUT `body` to the relay, signed; returns the status (200: it had it, 201: stored)."""
        url = f"{self.relay_url}/workers/{self.worker}{path}"
        last = ""
        for attempt in range(self.retry.attempts):
            if attempt:
                await asyncio.sleep(self.retry.delay(attempt - 1))
            headers = sign_push(self.key, self.relay, task_id, round_index, resource, content_hash, int(time.time()))
            try:
                async with self._client().put(url, data=body, headers=headers, allow_redirects=False) as response:
                    text = await response.text()
                    if response.status in (200, 201):
                        return response.status
                    if response.status < 500:
                        kind = BlobTooLarge if response.status == 413 else BlobRejected
                        raise kind(f"{url}: the relay refused the push: HTTP {response.status}: {text[:500]}")
                    last = f"HTTP {response.status}: {text[:200]}"
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as error:
                last = f"{type(error).__name__}: {error}"
        raise BlobUnavailable(f"{url}: gave up after {self.retry.attempts} attempts ({last})")

    async def push_blobs(self, task_id: int, round_index: int, digests: Iterable[str]) -> None:
        """Push each blob (read from the worker's store) for round `round_index` of `task_id`."""
        for digest in dict.fromkeys(d for d in digests if d):
            data = await asyncio.to_thread(self.store.get, digest)
            await self._put(f"/blobs/{digest}", data, task_id, round_index, "blob", digest)

    async def push_round(self, task_id: int, round_index: int, checkpoints: Sequence[str],
                         others: Iterable[str] = ()) -> None:
        """Push a round's checkpoints and `others` (its update, its residual), then its checkpoint listing."""
        await self.push_blobs(task_id, round_index, [*checkpoints, *others])
        body = json.dumps({"checkpoint_hashes": list(checkpoints)}).encode()
        await self._put(f"/tasks/{task_id}/rounds/{round_index}/checkpoints", body, task_id, round_index,
                        "checkpoints", hashlib.sha256(body).hexdigest())
