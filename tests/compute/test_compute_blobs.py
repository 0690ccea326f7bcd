"""The blob service on loopback: content addressing, owner-only writes, size limits, retries, hash checks."""

import asyncio
import hashlib
import os
import types

import pytest
from aiohttp import web

from trolly.compute.blobs import (AddressPolicy, BlobClient, BlobHashMismatch, BlobNotFound, BlobRejected, BlobServer,
                                  BlobStore, BlobTooLarge, BlobUnavailable, InvalidBlobHash, RetryPolicy)

FAST = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.05, request_timeout=5)
TOKEN = "owner-secret"
LOOPBACK = AddressPolicy(allow_private=True)
"""These tests' servers listen on 127.0.0.1, which a blob client refuses unless its node allows private hosts."""


def loopback_client(urls, **options) -> BlobClient:
    return BlobClient(urls, address_policy=LOOPBACK, **options)


def run(coroutine):
    return asyncio.run(coroutine)


async def serve(tmp_path, **options):
    server = BlobServer(BlobStore(tmp_path / "store", **options), owner_token=TOKEN)
    await server.start()
    return server


async def start_app(app):
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def test_put_then_fetch_returns_the_same_bytes(tmp_path):
    async def scenario():
        server = await serve(tmp_path)
        try:
            async with loopback_client(server.url, owner_token=TOKEN, retry=FAST) as client:
                digest = await client.put(b"hello blob")
                assert digest == hashlib.sha256(b"hello blob").hexdigest()
                assert await client.put(b"hello blob") == digest  # idempotent
                assert await client.fetch(digest) == b"hello blob"
                with pytest.raises(BlobNotFound):
                    await client.fetch("00" * 32)
                with pytest.raises(InvalidBlobHash):
                    await client.fetch("not-a-hash")
        finally:
            await server.stop()
    run(scenario())


def test_only_the_owner_may_write(tmp_path):
    async def scenario():
        server = await serve(tmp_path)
        try:
            async with loopback_client(server.url, owner_token="wrong", retry=FAST) as client:
                with pytest.raises(BlobRejected, match="401"):
                    await client.put(b"data")
            async with loopback_client(server.url, retry=FAST) as anonymous:
                with pytest.raises(BlobRejected, match="401"):
                    await anonymous.put(b"data")
            assert not server.store.has(hashlib.sha256(b"data").hexdigest())
        finally:
            await server.stop()
    run(scenario())


def test_a_put_whose_body_does_not_match_its_name_is_refused(tmp_path):
    async def scenario():
        server = await serve(tmp_path)
        try:
            async with loopback_client(server.url, owner_token=TOKEN, retry=FAST) as client:
                with pytest.raises(BlobHashMismatch):
                    await client._send("PUT", "/blobs/" + "ab" * 32, b"other bytes", "application/octet-stream")
            assert not server.store.has("ab" * 32)
        finally:
            await server.stop()
    run(scenario())


def test_size_limits_are_enforced_by_server_and_client(tmp_path):
    async def scenario():
        server = await serve(tmp_path, max_blob_size=1000)
        try:
            async with loopback_client(server.url, owner_token=TOKEN, retry=FAST) as client:
                with pytest.raises(BlobTooLarge):
                    await client.put(b"x" * 2000)
                digest = await client.put(b"y" * 900)
            async with loopback_client(server.url, retry=FAST, max_blob_size=100) as small:
                with pytest.raises(BlobTooLarge):
                    await small.fetch(digest)
        finally:
            await server.stop()
    run(scenario())


def test_a_blob_with_a_wrong_hash_is_refused_and_a_good_server_is_used_instead(tmp_path):
    good_bytes = b"the real checkpoint"
    digest = hashlib.sha256(good_bytes).hexdigest()

    async def lying(request):
        return web.Response(body=b"forged checkpoint")

    async def scenario():
        app = web.Application()
        app.router.add_get("/blobs/{digest}", lying)
        runner, rogue_url = await start_app(app)
        server = await serve(tmp_path)
        try:
            server.store.put(good_bytes)
            async with loopback_client([rogue_url], retry=FAST) as client:
                with pytest.raises(BlobHashMismatch):
                    await client.fetch(digest)
            async with loopback_client([rogue_url, server.url], retry=FAST) as client:
                assert await client.fetch(digest) == good_bytes
        finally:
            await server.stop()
            await runner.cleanup()
    run(scenario())


def test_a_fetched_blob_is_hashed_once_piece_by_piece_as_it_arrives(tmp_path, monkeypatch):
    from trolly.compute.blobs import client as client_module

    body = os.urandom(600_000)  # several pieces of the client's 64 KiB reads
    hashed = []

    class CountingHash:
        def __init__(self, data=b""):
            self._hash = hashlib.sha256(data)
            hashed.append(len(data))

        def update(self, data):
            hashed.append(len(data))
            self._hash.update(data)

        def hexdigest(self):
            return self._hash.hexdigest()

    monkeypatch.setattr(client_module, "hashlib", types.SimpleNamespace(sha256=CountingHash))

    async def scenario():
        server = await serve(tmp_path)
        try:
            digest = server.store.put(body)
            async with loopback_client(server.url, retry=FAST) as client:
                assert await client.fetch(digest) == body
        finally:
            await server.stop()
    run(scenario())
    assert sum(hashed) == len(body) and len([size for size in hashed if size]) > 1


def test_transient_server_errors_are_retried_with_backoff(tmp_path):
    payload = b"eventually"
    calls = []

    async def flaky(request):
        calls.append(asyncio.get_running_loop().time())
        if len(calls) < 3:
            return web.Response(status=503)
        return web.Response(body=payload)

    async def scenario():
        app = web.Application()
        app.router.add_get("/blobs/{digest}", flaky)
        runner, url = await start_app(app)
        try:
            policy = RetryPolicy(attempts=4, initial_delay=0.05, max_delay=1.0, request_timeout=5)
            async with loopback_client(url, retry=policy) as client:
                assert await client.fetch(hashlib.sha256(payload).hexdigest()) == payload
        finally:
            await runner.cleanup()
    run(scenario())
    assert len(calls) == 3
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09  # 0.05 then 0.1: exponential


def test_an_unreachable_server_ends_in_blob_unavailable():
    async def scenario():
        async with loopback_client("http://127.0.0.1:9", retry=FAST) as client:
            with pytest.raises(BlobUnavailable, match="3 attempts"):
                await client.fetch("00" * 32)
    run(scenario())


def test_checkpoint_listing_round_trips_and_needs_stored_blobs(tmp_path):
    async def scenario():
        server = await serve(tmp_path)
        try:
            async with loopback_client(server.url, owner_token=TOKEN, retry=FAST) as client:
                hashes = [await client.put(bytes([i]) * 10) for i in range(3)]
                await client.put_checkpoints(7, 2, hashes)
                assert await client.checkpoint_hashes(7, 2) == hashes
                with pytest.raises(BlobNotFound):
                    await client.checkpoint_hashes(7, 3)
                with pytest.raises(BlobRejected, match="not in the store"):
                    await client.put_checkpoints(7, 4, ["cd" * 32])
        finally:
            await server.stop()
    run(scenario())


def test_store_refuses_mismatched_bytes_and_leaves_nothing_behind(tmp_path):
    store = BlobStore(tmp_path)
    with pytest.raises(BlobHashMismatch):
        store.put(b"abc", expected="00" * 32)
    assert not any(path.is_file() for path in (tmp_path / "blobs").rglob("*"))


def test_put_hashed_stores_under_the_given_digest_and_keeps_the_size_limit(tmp_path):
    store = BlobStore(tmp_path, max_blob_size=10)
    digest = hashlib.sha256(b"checkpoint").hexdigest()
    assert store.put_hashed(b"checkpoint", digest) == digest
    assert store.get(digest) == b"checkpoint"
    with pytest.raises(BlobTooLarge):
        store.put_hashed(b"x" * 11, hashlib.sha256(b"x" * 11).hexdigest())
    with pytest.raises(InvalidBlobHash):
        store.put_hashed(b"abc", "zz")


def test_blob_writer_writes_everything_by_flush_and_reports_failures(tmp_path):
    from trolly.compute.blobs import BlobError, BlobWriter
    store = BlobStore(tmp_path, max_blob_size=100)
    payloads = [bytes([i]) * 50 for i in range(5)]
    writer = BlobWriter(store)
    try:
        for data in payloads:
            writer.write(hashlib.sha256(data).hexdigest(), data)
        writer.flush()
        assert all(store.get(hashlib.sha256(d).hexdigest()) == d for d in payloads)
        writer.write(hashlib.sha256(b"x" * 101).hexdigest(), b"x" * 101)  # over the limit
        with pytest.raises(BlobError, match="exceeds"):
            writer.flush()
        with pytest.raises(BlobError):
            writer.write("00" * 32, b"late")
    finally:
        with pytest.raises(BlobError):
            writer.close()


def test_put_hashing_stores_under_the_hash_of_the_bytes(tmp_path):
    store = BlobStore(tmp_path, max_blob_size=3 * 1024 * 1024)
    data = bytes(range(256)) * (2 * 1024 * 4 + 3)  # over the direct-I/O minimum, not a whole number of blocks
    digest = store.put_hashing(memoryview(data))
    assert digest == hashlib.sha256(data).hexdigest() and store.get(digest) == data
    assert store.put_hashing(data) == digest  # already there: the second copy is dropped
    assert incoming_files(tmp_path) == []
    with pytest.raises(BlobTooLarge):
        store.put_hashing(b"x" * (3 * 1024 * 1024 + 1))


def test_put_hashing_leaves_nothing_behind_when_the_write_or_the_hash_fails(tmp_path, monkeypatch):
    from trolly.compute.blobs import store as store_module
    store = BlobStore(tmp_path)

    def full_disk(directory, data, scratch=None):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(store_module, "_write_temporary", full_disk)
        with pytest.raises(OSError, match="No space"):
            store.put_hashing(b"checkpoint")

    class BrokenHash:
        def sha256(self, data):
            raise MemoryError("hashing failed")

    with monkeypatch.context() as patch:
        patch.setattr(store_module, "hashlib", BrokenHash())
        with pytest.raises(MemoryError):
            store.put_hashing(b"checkpoint")
    assert incoming_files(tmp_path) == [] and not any(p.is_file() for p in (tmp_path / "blobs").rglob("*"))


def incoming_files(root) -> list:
    return [path for path in root.rglob(".incoming*")]


@pytest.mark.parametrize("how", ["put", "put_hashing"])
@pytest.mark.parametrize("size", [1000, 2 * 1024 * 1024 + 5], ids=["small", "direct-io"])
def test_a_blob_is_fsynced_before_its_rename_and_its_directory_after(tmp_path, monkeypatch, how, size):
    from file_helpers import CallLog
    store = BlobStore(tmp_path)
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    log = CallLog(monkeypatch)
    digest = getattr(store, how)(data)
    monkeypatch.undo()
    target = str(store.path(digest))
    created = [call for call in log.calls if call[0] == "open" and call[2] & os.O_EXCL]
    assert len(created) == 1 and created[0][3] == 0o600
    temporary = created[0][1]
    file_synced = log.calls.index(("fsync", temporary))
    renamed = log.calls.index(("replace", temporary, target))
    directory_synced = log.calls.index(("fsync", str(store.path(digest).parent)), renamed)
    assert file_synced < renamed < directory_synced
    assert not [call for call in log.calls[file_synced:] if call[0] == "write"]  # nothing written after the fsync
    assert store.get(digest) == data and incoming_files(tmp_path) == []


def test_a_blob_whose_fsync_fails_is_not_stored_and_leaves_no_temporary(tmp_path, monkeypatch):
    store = BlobStore(tmp_path)

    def failing_fsync(descriptor):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        store.put(b"checkpoint bytes")
    monkeypatch.undo()
    assert not store.has(hashlib.sha256(b"checkpoint bytes").hexdigest()) and incoming_files(tmp_path) == []
