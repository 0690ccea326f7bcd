"""The blob relay over HTTP (compute/blobs/relay.py): what it takes, what it refuses and why, what it evicts.

Membership is read from a real in-process chain (`chain_helpers.Chain` through the same queries a node answers):
accounts[1] and [2] are members of a running task, accounts[3] is registered but joined nothing.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from market_helpers import MARKET_PARAMS, Market
from relay_helpers import push_headers, put, put_listing, run_relay

from trolly.chain.crypto import encode_address
from trolly.chain.proto import market_pb2 as pb
from trolly.compute.blobs import AddressPolicy, BlobClient, BlobStore
from trolly.compute.blobs.errors import BlobRejected, BlobTooLarge
from trolly.compute.blobs.relay_auth import TIME_HEADER
from trolly.compute.blobs.relay_push import RelayPusher
from trolly.compute.blobs.relay_store import RelayStore

WORKER_A = encode_address(bytes(range(20)))
WORKER_B = encode_address(bytes(range(1, 21)))


@pytest.fixture
def market(make_chain):
    market = Market(make_chain(accounts=5, validators=1, params={"market": MARKET_PARAMS}))
    market.task_id = market.open_task(workers=2)
    return market


def test_a_member_pushes_and_anyone_fetches_by_hash(market, tmp_path):
    member = market.workers[0]
    data = b"checkpoint bytes" * 100
    digest = hashlib.sha256(data).hexdigest()

    async def test(client, relay):
        assert await put(client, member, market.task_id, data) == (201, {"hash": digest, "size": len(data)})
        assert (await put(client, member, market.task_id, data))[0] == 200  # again: already held
        assert relay.members.client.asked == 1  # the task's members were read once for both
        worker = encode_address(member.address)
        for path in (f"/workers/{worker}/blobs/{digest}", f"/blobs/{digest}"):
            response = await client.get(path)
            assert response.status == 200 and await response.read() == data
        listing = json.dumps({"checkpoint_hashes": [digest]}).encode()
        assert (await put_listing(client, member, market.task_id, 0, listing))[0] == 201
        path = f"/workers/{worker}/tasks/{market.task_id}/rounds/0/checkpoints"
        assert await (await client.get(path)).json() == {"checkpoint_hashes": [digest]}
        assert (await client.get(f"/workers/{worker}/tasks/{market.task_id}/rounds/1/checkpoints")).status == 404

    run_relay(market, tmp_path, test)


@pytest.mark.parametrize("case, status, words", [
    ("bad hash", 400, "hash to"),
    ("oversize", 413, "exceeds the limit"),
    ("unsigned", 401, "unsigned push"),
    ("non-member", 403, "not an active member"),
    ("stale signature", 401, "replayed or delayed"),
    ("someone else's path", 401, "not by"),
    ("other content", 401, "not trolly1"),
    ("other task", 403, "not an active member"),
    ("malformed name", 400, "64 lower-case hex"),
])
def test_the_relay_refuses_a_bad_push_and_stores_nothing(market, tmp_path, case, status, words):
    member, stranger = market.workers[0], market.workers[2]
    data = b"x" * 2048
    digest = hashlib.sha256(data).hexdigest()
    other_task = market.submit(workers=2)  # open: nobody joined

    async def test(client, relay):
        if case == "bad hash":
            answer = await put(client, member, market.task_id, data, digest=hashlib.sha256(b"other").hexdigest())
        elif case == "oversize":
            answer = await put(client, member, market.task_id, data)
        elif case == "unsigned":
            answer = await put(client, member, market.task_id, data, headers={})
        elif case == "non-member":
            answer = await put(client, stranger, market.task_id, data)
        elif case == "stale signature":  # a push signed ten minutes ago, played again
            answer = await put(client, member, market.task_id, data,
                               headers=push_headers(client, member, market.task_id, digest, int(time.time()) - 600))
        elif case == "someone else's path":  # a stranger's signature on a member's place
            answer = await put(client, stranger, market.task_id, data, worker=encode_address(member.address))
        elif case == "other content":  # a member's signature of one blob, sent with another
            signed = push_headers(client, member, market.task_id, hashlib.sha256(b"signed").hexdigest())
            answer = await put(client, member, market.task_id, data, headers=signed)
        elif case == "other task":
            answer = await put(client, member, other_task, data)
        else:
            answer = await put(client, member, market.task_id, data, digest="ZZ" * 32)
        assert answer[0] == status and words in answer[1]["error"], answer
        assert not any((tmp_path / "relay" / "blobs").rglob("*"))  # not even a temporary file
        assert not list((tmp_path / "relay" / "blobs").rglob(digest))

    run_relay(market, tmp_path, test, max_blob_size=1024 if case == "oversize" else 1 << 20)


def test_a_settled_task_is_refused_and_then_evicted(market, tmp_path):
    member = market.workers[0]
    data = b"weights" * 64
    task_id = market.submit(workers=2)  # open, with one member: the requester can end it at once
    market.join(task_id, [member])

    async def test(client, relay):
        assert (await put(client, member, task_id, data))[0] == 201
        assert (await put(client, member, market.task_id, b"kept"))[0] == 201  # another task's: stays
        entry = relay.store.entry_bytes  # charged for each record's entry beside its bytes
        assert relay.store.total == len(data) + 4 + 2 * entry
        result = market.chain.deliver(market.requester, pb.MsgCancelTask(task_id=task_id))
        assert result.ok, result.log
        status, answer = await put(client, member, task_id, b"late")
        assert status == 403 and "is cancelled" in answer["error"]
        await relay.sweep()  # sees it settled (keep_settled 0): evicted
        assert relay.store.tasks() == [market.task_id] and relay.store.total == 4 + entry
        assert (await client.get(f"/blobs/{hashlib.sha256(data).hexdigest()}")).status == 404
        assert (await client.get(f"/blobs/{hashlib.sha256(b'kept').hexdigest()}")).status == 200

    run_relay(market, tmp_path, test, ttl=0.0)  # members read afresh for every push


def test_quota_per_worker_and_task(market, tmp_path):
    member = market.workers[0]

    async def test(client, relay):
        assert (await put(client, member, market.task_id, b"a" * 600))[0] == 201
        status, answer = await put(client, member, market.task_id, b"b" * 600)
        assert status == 507 and "quota of 1000 bytes" in answer["error"]
        assert (await put(client, market.workers[1], market.task_id, b"b" * 600))[0] == 201  # its own share

    run_relay(market, tmp_path, test, task_quota=1000, entry_bytes=100)


def test_the_pusher_publishes_a_round_and_a_blob_client_fetches_it_checked(market, tmp_path):
    member = market.workers[0]
    store = BlobStore(tmp_path / "worker")
    checkpoints = [store.put(f"checkpoint {i}".encode() * 50) for i in range(3)]
    update = store.put(b"update" * 10)

    async def test(client, relay):
        base = str(client.make_url("")).rstrip("/")
        pusher = RelayPusher(base, member, store)
        try:
            await pusher.push_round(market.task_id, 0, checkpoints, [update, ""])
            async with BlobClient(f"{base}/workers/{pusher.worker}",
                                  address_policy=AddressPolicy(allow_private=True)) as fetcher:
                assert await fetcher.checkpoint_hashes(market.task_id, 0) == checkpoints
                assert await fetcher.fetch(update) == b"update" * 10
            stranger = RelayPusher(base, market.workers[2], store)
            with pytest.raises(BlobRejected, match="HTTP 403"):
                await stranger.push_blobs(market.task_id, 0, [update])
            await stranger.close()
            small = RelayPusher(base, member, store)
            relay.store.blobs.max_blob_size = 100
            with pytest.raises(BlobTooLarge):
                await small.push_blobs(market.task_id, 0, [checkpoints[0]])
            await small.close()
        finally:
            await pusher.close()

    run_relay(market, tmp_path, test)


def test_the_time_header_must_be_a_plain_number(market, tmp_path):
    member = market.workers[0]
    data = b"y" * 10

    async def test(client, relay):
        headers = push_headers(client, member, market.task_id, hashlib.sha256(data).hexdigest())
        headers[TIME_HEADER] = "+" + headers[TIME_HEADER]
        status, answer = await put(client, member, market.task_id, data, headers=headers)
        assert status == 401 and "malformed signature headers" in answer["error"]

    run_relay(market, tmp_path, test)


def test_a_blob_two_tasks_hold_outlives_one_of_them_and_a_reopened_store_counts_what_it_holds(tmp_path):
    store = RelayStore(tmp_path / "relay", total_quota=10_000, entry_bytes=10)
    shared, own = b"s" * 300, b"o" * 200
    digests = {data: hashlib.sha256(data).hexdigest() for data in (shared, own)}
    assert store.add(1, WORKER_A, shared, digests[shared]) and store.add(1, WORKER_A, own, digests[own])
    assert store.add(2, WORKER_B, shared, digests[shared])
    assert not store.add(2, WORKER_B, shared, digests[shared])  # already named by that record
    assert store.total == 530 and RelayStore(tmp_path / "relay", entry_bytes=10).total == 530  # 3 entries of 10
    assert store.evict_task(1) == 220
    assert store.blobs.has(digests[shared]) and not store.blobs.has(digests[own])
    reopened = RelayStore(tmp_path / "relay", entry_bytes=10)
    assert reopened.total == 310 and reopened.tasks() == [2]
    assert reopened.evict_task(2) == 310 and not reopened.blobs.has(digests[shared]) and reopened.total == 0


def test_pushes_at_once_keep_every_entry_and_count(tmp_path):
    import concurrent.futures

    store = RelayStore(tmp_path / "relay", entry_bytes=0)
    blobs = [f"blob {i}".encode() * 40 for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        added = list(pool.map(lambda data: store.add(5, WORKER_A, data, hashlib.sha256(data).hexdigest()), blobs))
    assert all(added) and len(store.records[(5, WORKER_A)].blobs) == 24
    assert len(list((tmp_path / "relay" / "tasks" / "5" / WORKER_A / "blobs").iterdir())) == 24
    assert store.total == sum(map(len, blobs))
    assert store.evict_task(5) == sum(map(len, blobs)) and store.total == 0 and not store.references


def test_a_relay_home_of_the_first_layout_is_moved_to_one_file_an_entry(tmp_path):
    """A relay upgraded in place keeps what its workers pushed: each `<task>/<worker>.json` record becomes entries
    and listing files, and the blobs it named stay served."""
    old = BlobStore(tmp_path / "relay")
    digest = old.put(b"pushed before the upgrade")
    record = tmp_path / "relay" / "tasks" / "4" / f"{WORKER_A}.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"blobs": {digest: 25}, "listings": {"2": [digest]}}))
    store = RelayStore(tmp_path / "relay", entry_bytes=10)
    assert not record.exists() and store.blobs.has(digest)
    assert json.loads(store.listing(4, WORKER_A, 2)) == {"checkpoint_hashes": [digest]}
    assert store.total == 25 + 10 + len(store.listing(4, WORKER_A, 2)) + 10
