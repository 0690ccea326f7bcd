"""Blob fetches connect only where the node allows (compute/blobs/connect_policy.py): no loopback, private,
link-local, metadata, unspecified or multicast address unless `allow_private_blob_hosts`; the address checked
is the one connected to; no redirect is followed. Real aiohttp servers on 127.0.0.x."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import ipaddress
import socket

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver

from trolly.compute.blobs import (AddressPolicy, BlobAddressRefused, BlobClient, BlobError, BlobRedirectRefused,
                                  BlobRejected, RetryPolicy, blob_session)
from trolly.compute.blobs.connect_policy import refusal

FAST = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.05, request_timeout=5)
PAYLOAD = b"a blob that must not leak from a private service"
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
PRIVATE_OK = AddressPolicy(allow_private=True)


class CountingServer:
    """An aiohttp server on `host` that serves PAYLOAD (or redirects) and counts the requests it gets."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, redirect_to: str = "") -> None:
        self.host, self.port, self.redirect_to = host, port, redirect_to
        self.requests: list[str] = []
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path)
        if self.redirect_to:
            raise web.HTTPFound(self.redirect_to + request.path)
        return web.Response(body=PAYLOAD)

    async def __aenter__(self) -> "CountingServer":
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.runner.cleanup()

    def url(self, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}"


def run(coroutine):
    return asyncio.run(coroutine)


async def fetch(url: str, policy: AddressPolicy = AddressPolicy(), **options) -> bytes:
    async with BlobClient([url], retry=FAST, address_policy=policy, **options) as client:
        return await client.fetch(DIGEST)


# -- the classes ---------------------------------------------------------------------------------------------------
REFUSED = [
    ("127.0.0.1", "loopback"), ("127.5.6.7", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("172.31.255.254", "private"), ("192.168.1.1", "private"),
    ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("169.254.10.1", "link-local"), ("fe80::1", "link-local"),
    ("169.254.169.254", "cloud metadata"), ("fd00:ec2::254", "cloud metadata"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "cloud metadata"), ("::ffff:10.1.2.3", "private"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata"), ("2002:c0a8:0101::1", "private"),
    ("::127.0.0.1", "loopback"), ("::169.254.169.254", "cloud metadata"), ("::10.1.2.3", "private"),
    ("::ffff:0:127.0.0.1", "loopback"), ("::ffff:0:a9fe:a9fe", "cloud metadata"), ("::ffff:0:192.168.0.1", "private"),
    ("100.64.0.1", "not globally routable"), ("240.0.0.1", "not globally routable"),
]


@pytest.mark.parametrize("address, reason", REFUSED)
def test_each_refused_class_is_named(address, reason):
    assert refusal(ipaddress.ip_address(address)) == reason
    assert AddressPolicy().refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::200e",
                                     "::ffff:0:8.8.8.8"])
def test_public_addresses_are_allowed(address):
    assert AddressPolicy().refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address, reason", REFUSED)
def test_a_fetch_from_a_refused_literal_fails_without_connecting(address, reason):
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(BlobAddressRefused, match=reason):
        run(fetch(f"http://{host}:8600"))


def test_a_refused_fetch_is_not_retried_and_reaches_no_server():
    async def scenario():
        async with CountingServer() as server:
            with pytest.raises(BlobAddressRefused, match="loopback.*allow_private_blob_hosts"):
                await fetch(server.url())
            return server.requests
    assert run(scenario()) == []
    assert issubclass(BlobAddressRefused, BlobRejected)  # a fetch that failed for good, like a 4xx


def test_a_name_that_resolves_to_loopback_is_refused_after_resolution():
    async def scenario():
        async with CountingServer() as server:
            with pytest.raises(BlobAddressRefused, match="localhost resolves only to refused addresses"):
                await fetch(server.url("localhost"))
            return server.requests
    assert run(scenario()) == []


# -- the allow switch ------------------------------------------------------------------------------------------------
def test_allowing_private_hosts_lets_loopback_through_by_address_and_by_name():
    async def scenario():
        async with CountingServer() as server:
            assert await fetch(server.url(), PRIVATE_OK) == PAYLOAD
            assert await fetch(server.url("localhost"), PRIVATE_OK) == PAYLOAD
            return server.requests
    assert run(scenario()) == [f"/blobs/{DIGEST}"] * 2


@pytest.mark.parametrize("address", ["169.254.169.254", "[fd00:ec2::254]", "[::ffff:169.254.169.254]"])
def test_cloud_metadata_stays_refused_even_when_private_hosts_are_allowed(address):
    with pytest.raises(BlobAddressRefused, match="cloud metadata"):
        run(fetch(f"http://{address}/", PRIVATE_OK))


@pytest.mark.parametrize("address", ["10.0.0.1", "192.168.0.1", "169.254.1.1", "[fc00::1]", "[fe80::1]"])
def test_allowed_private_addresses_are_not_refused(address):
    policy = PRIVATE_OK
    assert policy.refusal(ipaddress.ip_address(address.strip("[]"))) is None


# -- the address connected to is the address checked -----------------------------------------------------------------
class ScriptedResolver(AbstractResolver):
    """Stands in for DNS (inside these tests only): answers each lookup with the next list of addresses."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.lookups = 0

    async def resolve(self, host, port=0, family=socket.AF_INET):
        addresses = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        return [{"hostname": host, "host": address, "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST} for address in addresses]

    async def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class OnlyTwo(AddressPolicy):
    """A policy (for these tests) under which 127.0.0.2 plays a public host and everything else is refused."""

    connected: list = dataclasses.field(default_factory=list)

    def refusal(self, address):
        return None if str(address) == "127.0.0.2" else "test-refused"

    def socket_for(self, addr_info):
        self.connected.append(addr_info[4][0])
        return super().socket_for(addr_info)


def test_a_name_that_rebinds_to_loopback_after_its_check_still_connects_where_it_was_checked():
    """DNS rebinding: the first answer passes the check, later ones point at a private service. The name is
    resolved once and the connection goes to the checked address."""
    async def scenario():
        async with CountingServer("127.0.0.2") as public:
            async with CountingServer("127.0.0.1", port=public.port) as private:
                resolver = ScriptedResolver(["127.0.0.2"], ["127.0.0.1"], ["127.0.0.1"])
                policy = OnlyTwo()
                data = await fetch(f"http://blobs.rebinding.test:{public.port}", policy, resolver=resolver)
                return data, resolver.lookups, policy.connected, public.requests, private.requests
    data, lookups, connected, public_requests, private_requests = run(scenario())
    assert data == PAYLOAD and lookups == 1 and connected == ["127.0.0.2"]
    assert public_requests == [f"/blobs/{DIGEST}"] and private_requests == []


def test_refused_answers_are_dropped_and_only_the_allowed_address_is_connected_to():
    async def scenario():
        async with CountingServer("127.0.0.2") as public:
            async with CountingServer("127.0.0.1", port=public.port) as private:
                policy = OnlyTwo()
                data = await fetch(f"http://mixed.test:{public.port}", policy,
                                   resolver=ScriptedResolver(["127.0.0.1", "127.0.0.2"]))
                return data, policy.connected, private.requests
    data, connected, private_requests = run(scenario())
    assert data == PAYLOAD and connected == ["127.0.0.2"] and private_requests == []


def test_a_name_with_only_refused_answers_is_refused_with_every_reason():
    expected = "only to refused addresses: 10.0.0.1 is a private.*169.254.169.254 is a cloud metadata"
    with pytest.raises(BlobAddressRefused, match=expected):
        run(fetch("http://evil.test:8600", resolver=ScriptedResolver(["10.0.0.1", "169.254.169.254"])))


def test_the_socket_factory_refuses_what_the_resolver_let_through():
    """The last guard sits right before connect(): an address the resolver did not judge (an IP literal is not
    resolved) is checked there."""
    with pytest.raises(BlobAddressRefused, match="loopback"):
        AddressPolicy().socket_for((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    made = PRIVATE_OK.socket_for((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    made.close()


# -- redirects -------------------------------------------------------------------------------------------------------
def test_a_redirect_to_another_host_is_refused_and_the_other_host_is_not_contacted():
    async def scenario():
        async with CountingServer() as target:
            async with CountingServer(redirect_to=target.url("localhost")) as redirecting:
                with pytest.raises(BlobRedirectRefused, match="302 redirect to .*localhost.* refused"):
                    await fetch(redirecting.url(), PRIVATE_OK)
                return redirecting.requests, target.requests
    first, second = run(scenario())
    assert first == [f"/blobs/{DIGEST}"] and second == []  # asked once (not retried), never followed


def test_a_redirect_to_the_same_host_is_not_followed_either():
    async def scenario():
        async with CountingServer() as server:
            async with CountingServer(redirect_to=server.url()) as redirecting:
                with pytest.raises(BlobRedirectRefused):
                    await fetch(redirecting.url(), PRIVATE_OK)
                return server.requests
    assert run(scenario()) == []


def test_an_upload_answered_with_a_redirect_is_refused():
    async def scenario():
        async with CountingServer() as target:
            async with CountingServer(redirect_to=target.url()) as redirecting:
                async with BlobClient([redirecting.url()], retry=FAST, address_policy=PRIVATE_OK,
                                      owner_token="t") as client:
                    with pytest.raises(BlobRedirectRefused):
                        await client.put(PAYLOAD)
                return target.requests
    assert run(scenario()) == []


# -- sessions --------------------------------------------------------------------------------------------------------
def test_a_shared_session_must_be_a_guarded_one():
    async def scenario():
        async with aiohttp.ClientSession() as plain:
            with pytest.raises(BlobError, match="blob_session"):
                BlobClient(["http://127.0.0.1:1"], session=plain)
        guarded = blob_session(AddressPolicy(), 5)
        try:
            client = BlobClient(["http://127.0.0.1:1"], session=guarded)
            with pytest.raises(BlobAddressRefused):
                await client.fetch(DIGEST)
        finally:
            await guarded.close()
    run(scenario())


def test_the_environment_cannot_route_fetches_through_a_proxy(monkeypatch):
    """A proxy would connect on our behalf, past the policy: sessions ignore HTTP(S)_PROXY."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")

    async def scenario():
        async with CountingServer() as server:
            return await fetch(server.url(), PRIVATE_OK)
    assert run(scenario()) == PAYLOAD


# -- every fetcher goes through the policy, and the node's setting reaches it --------------------------------------
def pycorpus_spec(blobs, urls):
    """A task on a text dataset that does not build locally (so it must be fetched from `urls`)."""
    from trolly.compute.spec import example_spec, spec_from_dict

    dataset = {"name": "pycorpus", "manifest_hash": blobs.manifest_hash, "urls": urls}
    return spec_from_dict(example_spec(blobs.manifest_hash, model={"arch": "transformer", "config": {}}, dataset=dataset))


def test_a_worker_refuses_a_dataset_on_a_private_host_unless_its_config_allows_it(tmp_path):
    from trolly.compute.blobs import BlobServer, BlobStore
    from trolly.compute.data import build_dataset
    from trolly.compute.worker.data import obtain_dataset

    small = build_dataset("pycorpus", max_bytes=20_000)  # does not build locally: it must be fetched
    served = BlobStore(tmp_path / "requester")
    for data in small.all_blobs().values():
        served.put(data)

    async def scenario():
        async with BlobServer(served) as server:
            spec = pycorpus_spec(small, [server.url])
            with pytest.raises(BlobAddressRefused, match="loopback"):
                await obtain_dataset(BlobStore(tmp_path / "refusing"), spec, AddressPolicy())
            return await obtain_dataset(BlobStore(tmp_path / "allowing"), spec, PRIVATE_OK)
    assert run(scenario()).manifest_hash == small.manifest_hash


def test_a_worker_does_not_mirror_a_peer_update_from_a_private_host_unless_allowed(tmp_path):
    from trolly.compute.blobs import BlobServer, BlobStore
    from trolly.compute.models import DataShape
    from trolly.compute.spec import example_spec, spec_from_dict
    from trolly.compute.weights_follower import RoundUpdate, WeightsFollower

    spec = spec_from_dict(example_spec("ab" * 32))
    shape = DataShape(kind="classification", input_size=64, num_classes=10)

    async def scenario():
        peer = BlobStore(tmp_path / "peer")
        digest = peer.put(PAYLOAD)
        async with BlobServer(peer) as server:
            update = RoundUpdate(worker="w1", worker_index=1, update_hash=digest, samples_processed=1,
                                 outcome="pending", blob_url=server.url)
            ours = BlobStore(tmp_path / "ours")
            refused = await WeightsFollower(spec, shape, AddressPolicy(), store=ours, retry=FAST).mirror([update])
            allowed = await WeightsFollower(spec, shape, PRIVATE_OK, store=ours, retry=FAST).mirror([update])
            return refused, allowed, ours.has(digest), digest
    refused, allowed, stored, digest = run(scenario())
    assert refused == [digest] and allowed == [] and stored


def test_a_verifier_refuses_a_dataset_on_a_private_host_unless_allowed():
    from trolly.compute.data import build_dataset
    from trolly.verifier.dataset_fetch import TaskDatasets
    from trolly.verifier.errors import WorkUnavailable

    small = build_dataset("pycorpus", max_bytes=20_000)
    with pytest.raises(WorkUnavailable, match="loopback"):
        run(TaskDatasets().task_dataset(pycorpus_spec(small, ["http://127.0.0.1:9"]), [], FAST, AddressPolicy()))


def test_the_worker_and_verifier_settings_default_to_refusing_and_reach_their_services(tmp_path):
    from trolly.compute.worker.config import WorkerConfig, load_config, save_config
    from trolly.verifier.service import ServiceConfig

    assert WorkerConfig(key_name="w").allow_private_blob_hosts is False
    assert ServiceConfig(home=tmp_path).allow_private_blob_hosts is False
    save_config(tmp_path, WorkerConfig(key_name="w", allow_private_blob_hosts=True))
    assert load_config(tmp_path).allow_private_blob_hosts is True


def test_the_clis_take_the_switch_and_the_worker_init_saves_it(tmp_path):
    import json

    from click.testing import CliRunner

    from trolly.compute.worker.cli import main as worker_cli
    from trolly.verifier.cli import main_group as verifier_cli

    commands = ((worker_cli, "init"), (worker_cli, "start"), (verifier_cli, "start"), (verifier_cli, "replay"))
    for cli, command in commands:
        assert "--allow-private-blob-hosts" in CliRunner().invoke(cli, [command, "--help"]).output
    for flags, expected in (([], False), (["--allow-private-blob-hosts"], True)):
        home = tmp_path / f"worker-{expected}"
        result = CliRunner().invoke(worker_cli, ["init", "--home", str(home), "--key", "w", "--keyring-backend", "test",
                                                 "--create-key", "--blob-port", "8700", *flags])
        assert result.exit_code == 0, result.output
        assert json.loads((home / "worker.json").read_text())["allow_private_blob_hosts"] is expected


def test_a_localnet_allows_private_hosts_for_its_workers_and_verifiers(tmp_path):
    from trolly.localnet.clients import verifier_services, worker_services
    from trolly.localnet.home_layout import Layout, LocalnetConfig

    layout, config = Layout(tmp_path), LocalnetConfig(engine="cometbft", validators=2, workers=2)
    for spec in verifier_services(layout, config) + worker_services(layout, config):
        assert "--allow-private-blob-hosts" in spec.argv, spec.name


@pytest.mark.parametrize("public_url, message", [
    ("https://user:pw@blobs.example", "user information"), ("http://blobs.example:99999", "port"),
    ("ftp://blobs.example", "http:// or https://"),
])
def test_a_worker_refuses_a_public_url_the_chain_would_refuse(public_url, message):
    from trolly.compute.worker.config import WorkerConfig
    from trolly.compute.worker.errors import WorkerHomeError

    with pytest.raises(WorkerHomeError, match=message):
        WorkerConfig(key_name="w", public_url=public_url)
