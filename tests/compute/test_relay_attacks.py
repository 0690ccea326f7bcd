"""What a stranger, or a member of a task, could make a blob relay store, parse or serve (issue 32 item 4), each
against a real relay over HTTP with its members read from an in-process chain (`relay_helpers`).

On the relay before this fix: listings counted against no quota (40 listing pushes grew a record to 38 MiB
against a 1,000-byte quota), every push and listing GET parsed the member's whole record on the event loop
(/health waited about a second behind five GETs), a push refused after its body was read (over the quota) left
its blob on disk and served, `%2F` in a listing GET's worker address read any `.json` file outside the store,
and a push's signature named no relay and no round, so it could be played to another relay within its 300 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest
import yarl
from click.testing import CliRunner
from market_helpers import MARKET_PARAMS, Market, settle_round
from relay_helpers import base_url, make_relay, push_headers, put, put_listing, run_relay, serve

from trolly.chain.crypto import encode_address
from trolly.compute.blobs.relay_auth import (FIRST_FORMAT_HEADERS, RELAY_HEADER, ROUND_HEADER, relay_identity,
                                             sign_push)
from trolly.compute.blobs.relay_store import QuotaExceeded, RelayStore


@pytest.fixture
def market(make_chain):
    market = Market(make_chain(accounts=5, validators=1, params={"market": MARKET_PARAMS}))
    market.task_id = market.open_task(workers=2)
    return market


def disk_bytes(directory) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def listing_body(hashes: list[str]) -> bytes:
    return json.dumps({"checkpoint_hashes": hashes}).encode()


def test_listings_count_against_the_quota_and_cannot_grow_a_record_past_it(market, tmp_path):
    """Attack: push listing after listing (other rounds, the longest listings the body bound allows) to grow one
    record without bound, as 40 such pushes grew one to 38 MiB against a 1,000-byte quota."""
    member = market.workers[0]
    data = b"c" * 100
    digest = hashlib.sha256(data).hexdigest()
    quota = 64 * 1024

    async def test(client, relay):
        assert (await put(client, member, market.task_id, data))[0] == 201
        longest = listing_body([digest] * relay.store.max_listing_entries)
        status, answer = await put_listing(client, member, market.task_id, 0, longest)
        assert status == 507 and f"quota of {quota} bytes" in answer["error"], answer
        over = listing_body([digest] * (relay.store.max_listing_entries + 1))
        status, answer = await put_listing(client, member, market.task_id, 0, over)
        assert status in (400, 413), answer  # past the listing bound: refused before it is parsed or kept
        for round_index in range(1, 40):  # rounds the task is not in: refused whatever their size
            status, answer = await put_listing(client, member, market.task_id, round_index, listing_body([digest]))
            assert status == 409 and "is in round 0" in answer["error"], answer
        for _ in range(40):  # the same round again and again: replaced, charged once
            assert (await put_listing(client, member, market.task_id, 0, listing_body([digest] * 100)))[0] == 201
        record = relay.store.records[(market.task_id, encode_address(member.address))]
        assert record.used <= quota and relay.store.total <= quota
        assert disk_bytes(tmp_path / "relay" / "tasks") <= quota

    run_relay(market, tmp_path, test, task_quota=quota)


def test_the_store_charges_every_listing_to_the_quota(tmp_path):
    """Attack (at the store): listings for ever more rounds, each well-formed, until the quota is spent."""
    worker = encode_address(bytes(20))
    store = RelayStore(tmp_path / "relay", task_quota=100_000, entry_bytes=1000)
    digest = hashlib.sha256(b"x").hexdigest()
    store.add(7, worker, b"x", digest)
    with pytest.raises(QuotaExceeded, match="quota of 100000 bytes"):
        for round_index in range(10_000):
            store.set_listing(7, worker, round_index, [digest] * 50)
    assert round_index < 40 and store.records[(7, worker)].used <= 100_000
    assert RelayStore(tmp_path / "relay", task_quota=100_000, entry_bytes=1000).total == store.total  # as counted


def test_health_answers_while_listing_gets_and_pushes_run(market, tmp_path):
    """Attack: anonymous GETs of a member's listings, many at once, to stall the relay's event loop (a GET parsed
    the whole record there: /health took about a second behind five)."""
    member = market.workers[0]
    digests = []

    async def test(client, relay):
        for i in range(20):
            data = f"checkpoint {i}".encode() * 30
            assert (await put(client, member, market.task_id, data))[0] == 201
            digests.append(hashlib.sha256(data).hexdigest())
        huge = listing_body((digests * 750)[:15_000])  # the 1 MiB listings that grew a record to 38 MiB
        for round_index in range(40):
            assert (await put_listing(client, member, market.task_id, round_index, huge))[0] == 413
        longest = listing_body((digests * 60)[:relay.store.max_listing_entries])
        assert (await put_listing(client, member, market.task_id, 0, longest))[0] == 201
        for round_index in range(1, 40):
            assert (await put_listing(client, member, market.task_id, round_index, longest))[0] == 409
        path = f"/workers/{encode_address(member.address)}/tasks/{market.task_id}/rounds/0/checkpoints"

        async def get_listing():
            response = await client.get(path)
            assert response.status == 200 and len((await response.json())["checkpoint_hashes"]) > 1000

        async def health() -> float:
            began = time.monotonic()
            assert (await client.get("/health")).status == 200
            return time.monotonic() - began

        load = [asyncio.create_task(get_listing()) for _ in range(60)]
        await asyncio.sleep(0)
        waits = [await health() for _ in range(5)]
        await asyncio.gather(*load)
        assert max(waits) < 1.0, waits  # generous: a loop parsing records waits far longer

    run_relay(market, tmp_path, test)


def test_a_push_refused_over_the_quota_leaves_no_file_and_nothing_served(market, tmp_path):
    """Attack: many pushes at once against a quota with room for one; those refused after their bodies came
    (each checked the quota before another was recorded) stayed on disk, uncounted, and were served."""
    member = market.workers[0]
    blobs = [f"blob {i}".encode() * 200 for i in range(12)]

    async def test(client, relay):
        answers = await asyncio.gather(*(put(client, member, market.task_id, data) for data in blobs))
        statuses = [status for status, _ in answers]
        assert statuses.count(201) == 1 and statuses.count(507) == 11, answers
        for data, (status, _) in zip(blobs, answers):
            digest = hashlib.sha256(data).hexdigest()
            served = (await client.get(f"/blobs/{digest}")).status
            assert served == (200 if status == 201 else 404)
            assert bool(list((tmp_path / "relay" / "blobs").rglob(digest))) == (status == 201)
        assert not list((tmp_path / "relay" / "blobs").glob(".*"))  # no temporary left
        assert relay.store.reserved == 0 and relay.store.total == len(blobs[0]) + relay.store.entry_bytes

    run_relay(market, tmp_path, test, task_quota=2000, entry_bytes=100)


def test_a_store_opened_again_removes_what_no_record_names(tmp_path):
    """A crash between a blob's rename and its entry, or inside a body's write, leaves nothing that stays."""
    worker = encode_address(bytes(20))
    store = RelayStore(tmp_path / "relay")
    kept = b"kept"
    store.add(3, worker, kept, hashlib.sha256(kept).hexdigest())
    orphan = store.blobs.path(hashlib.sha256(b"orphan").hexdigest())
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"orphan")
    incoming = store.receive()
    incoming.write(b"half a body")
    reopened = RelayStore(tmp_path / "relay")
    assert not orphan.exists() and not incoming.path.exists()
    assert reopened.blobs.has(hashlib.sha256(kept).hexdigest()) and reopened.total == store.total


@pytest.mark.parametrize("worker_part", [
    "..%2F..%2F..%2Fsecret",          # %2F: decoded to / by the router
    "..%2f..%2f..%2fsecret",
    "trolly1..%2F..%2Fsecret",
    "%2E%2E",
    "TROLLY1QQQSYQCYQ5RQWZQFPG9SCRGWPUGPZYSN5QSW0ZC",  # an upper-case address: not the one canonical form
    "trolly1qqqsyqcyq5rqwzqfpg9scrgwpugpzysn5qsw0zd",  # a wrong checksum
    "cosmos1qqqsyqcyq5rqwzqfpg9scrgwpugpzysn5xh3ex0",
    "x" * 300,
])
def test_a_malformed_worker_address_in_a_path_is_400_and_reads_nothing_outside(market, tmp_path, worker_part):
    """Attack: a listing GET (or a push) whose worker address walks out of the store (`%2F`, `..`) read any .json
    file there (200 with its contents)."""
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"blobs": {}, "listings": {"0": ["the secret"]}}))

    async def test(client, relay):
        assert (await put(client, market.workers[0], market.task_id, b"pushed"))[0] == 201  # the task has a record
        for method in ("GET", "PUT"):
            url = yarl.URL(f"{base_url(client)}/workers/{worker_part}/tasks/{market.task_id}/rounds/0/checkpoints",
                           encoded=True)
            response = await client.session.request(method, url, data=b"{}")
            text = await response.text()
            assert response.status == 400 and "the secret" not in text, (method, response.status, text)
        url = yarl.URL(f"{base_url(client)}/workers/{worker_part}/blobs/{'ab' * 32}", encoded=True)
        assert (await client.session.get(url)).status == 400

    run_relay(market, tmp_path, test)


@pytest.mark.parametrize("task_part, round_part", [
    ("+1", "0"), ("01", "0"), ("1_0", "0"), ("%D9%A3", "0"), ("1", "-0"), ("1", "18446744073709551616"),
    ("1", "0x1"), ("1%2F..", "0"),
])
def test_a_task_id_or_round_that_is_not_a_plain_number_is_400(market, tmp_path, task_part, round_part):
    """Attack: task ids and rounds in forms `int()` takes (a sign, a leading zero, an underscore, Arabic-Indic
    digits) that make other paths than the number's."""
    worker = encode_address(market.workers[0].address)

    async def test(client, relay):
        url = yarl.URL(f"{base_url(client)}/workers/{worker}/tasks/{task_part}/rounds/{round_part}/checkpoints",
                       encoded=True)
        response = await client.session.get(url)
        assert response.status == 400 and "not an unsigned 64-bit decimal number" in await response.text()

    run_relay(market, tmp_path, test)


def test_a_push_signed_for_another_relay_or_round_is_refused(market, tmp_path):
    """Attack: a relay (or anyone who saw a push) plays it to another relay within its time window; or plays a
    round's push in another round. (A relay keeps a task's round `ttl` seconds, so a push for a round that has
    just closed may be taken that long: its own bytes, which that round named.)"""
    member = market.workers[0]
    data = b"replayed" * 40
    digest = hashlib.sha256(data).hexdigest()

    async def test(client, relay):
        for_relay_a = sign_push(member, "http://relay-a.example:8650", market.task_id, 0, "blob", digest,
                                int(time.time()))
        status, answer = await put(client, member, market.task_id, data, headers=for_relay_a)
        assert status == 421 and "signed for the relay http://relay-a.example:8650" in answer["error"], answer
        for_round_1 = push_headers(client, member, market.task_id, digest, round_index=1)
        status, answer = await put(client, member, market.task_id, data, headers=for_round_1)
        assert status == 409 and "signed for round 1" in answer["error"], answer
        assert not list((tmp_path / "relay" / "blobs").rglob("*"))
        assert (await client.get(f"/blobs/{digest}")).status == 404

        listing = listing_body([digest])
        assert (await put(client, member, market.task_id, data))[0] == 201
        signed_for_0 = push_headers(client, member, market.task_id, hashlib.sha256(listing).hexdigest(), None, 0,
                                    "checkpoints")
        status, answer = await put_listing(client, member, market.task_id, 1, listing, headers=signed_for_0)
        assert status == 401 and "signed for round 0, not round 1" in answer["error"], answer

        market.commit(market.task_id, 0, market.workers[:2])
        settle_round(market, market.task_id)  # round 0 is over: the chain is in round 1
        status, answer = await put(client, market.workers[1], market.task_id, b"late" * 10)
        assert status == 409 and "is in round 1" in answer["error"], answer
        late = push_headers(client, market.workers[1], market.task_id, hashlib.sha256(b"late" * 10).hexdigest(),
                            round_index=1)
        assert (await put(client, market.workers[1], market.task_id, b"late" * 10, headers=late))[0] == 201

    run_relay(market, tmp_path, test, ttl=0.0)  # members and round read afresh for every push


def test_one_push_is_good_at_one_relay_only(market, tmp_path):
    """Attack: the same signed push sent to relay A and to relay B: A takes it, B refuses it."""
    member = market.workers[0]
    data = b"once" * 64
    digest = hashlib.sha256(data).hexdigest()
    relay_b = make_relay(market, tmp_path / "relay-b")

    async def test(client_a, relay_a):
        headers = push_headers(client_a, member, market.task_id, digest)
        assert (await put(client_a, member, market.task_id, data, headers=headers))[0] == 201

        async def at_b(client_b, relay):
            status, answer = await put(client_b, member, market.task_id, data, headers=headers)
            assert status == 421 and f"this relay is {base_url(client_b)}" in answer["error"], answer
            assert (await client_b.get(f"/blobs/{digest}")).status == 404

        await serve(relay_b, at_b)

    run_relay(market, tmp_path, test)
    assert not list((tmp_path / "relay-b" / "blobs").rglob("*"))


def test_an_old_format_push_is_refused_saying_so_and_a_public_url_is_compared_in_one_form(market, tmp_path):
    member = market.workers[0]
    data = b"v" * 30
    digest = hashlib.sha256(data).hexdigest()

    async def test(client, relay):
        old = {name: value for name, value in push_headers(client, member, market.task_id, digest).items()
               if name in FIRST_FORMAT_HEADERS}
        status, answer = await put(client, member, market.task_id, data, headers=old)
        assert status == 401 and "old format (trolly-relay-push/v1" in answer["error"], answer
        assert RELAY_HEADER in answer["error"] and ROUND_HEADER in answer["error"]
        relay.known_as = (relay_identity("https://relay.example"),)  # behind a proxy: --public-url
        headers = sign_push(member, "https://Relay.Example:443/", market.task_id, 0, "blob", digest, int(time.time()))
        assert (await put(client, member, market.task_id, data, headers=headers))[0] == 201

    run_relay(market, tmp_path, test)


def test_a_relay_on_every_address_must_be_told_its_public_url(tmp_path):
    from trolly.verifier.relay_cli import relay

    result = CliRunner().invoke(relay, ["--node", "http://127.0.0.1:9", "--home", str(tmp_path / "r"),
                                        "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2 and "--public-url" in result.output and "every address" in result.output
    result = CliRunner().invoke(relay, ["--node", "http://127.0.0.1:9", "--home", str(tmp_path / "r"),
                                        "--public-url", "ftp://relay.example"])
    assert result.exit_code == 2 and "relay must start with http" in result.output
