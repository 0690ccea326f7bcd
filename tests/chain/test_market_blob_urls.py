"""A worker's blob URL is checked on chain (chain/market/urls.py): scheme, host, port, no user information,
bounded length, printable ASCII; refused with InvalidBlobUrl (market code 42) by RegisterWorker and
UpdateWorker alike, leaving the state unchanged."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from market_helpers import MARKET_PARAMS, STAKE, Market, assert_fails, market_snapshot
from trolly.chain.market.errors import InvalidBlobUrl, InvalidWorkerProfile
from trolly.chain.market.params import MarketParams
from trolly.chain.market.urls import MAX_URL_BYTES, check_blob_url, is_ipv4_literal, is_ipv6_literal
from trolly.chain.proto import market_pb2 as pb

HARDWARE = pb.HardwareProfile(device="cpu", samples_per_second=250, memory_mb=2048, threads=2)

ACCEPTED = [
    "http://127.0.0.1:9000",
    "https://worker.example",
    "https://worker.example/",
    "https://blobs.worker-1.example.org:8443/trolly/v1",
    "http://10.0.0.7:1",
    "http://192.168.1.2:65535/",
    "http://[::1]:8600",
    "http://[2001:db8::42]",
    "http://[::ffff:192.0.2.1]:80/a",
    "https://xn--bcher-kva.example/path%20with%2Fescapes",
    "http://0.0.0.0:8600",  # the shape is fine; fetchers refuse the address (not the chain's business)
    "http://localhost:8600",
    "https://a.b.c.d.e.f.example/~user/x;y=z",
    "https://" + "a" * 63 + ".example",
]

REFUSED = {
    "empty": "",
    "ftp scheme": "ftp://worker.example",
    "no scheme": "worker.example:8600",
    "upper-case scheme": "HTTP://worker.example",
    "file scheme": "file:///etc/passwd",
    "javascript": "javascript:alert(1)",
    "userinfo": "http://user:secret@worker.example",
    "userinfo without password": "http://user@worker.example",
    "userinfo hiding the host": "http://worker.example@169.254.169.254/",
    "space": "http://worker.example/a b",
    "tab": "http://worker.example/\tx",
    "newline": "http://worker.example/\r\nHost: evil",
    "nul": "http://worker.example\x00.evil",
    "non-ascii host": "http://bücher.example",
    "non-ascii path": "http://worker.example/ü",
    "backslash": "http://worker.example\\@evil.example/",
    "query": "http://worker.example/?x=1",
    "fragment": "http://worker.example/#top",
    "no host": "http:///blobs",
    "empty host with port": "http://:8600",
    "port zero": "http://worker.example:0",
    "port too large": "http://worker.example:65536",
    "port leading zero": "http://worker.example:08600",
    "port empty": "http://worker.example:",
    "port not a number": "http://worker.example:http",
    "port signed": "http://worker.example:+80",
    "two ports": "http://worker.example:80:81",
    "label too long": "https://" + "a" * 64 + ".example",
    "name too long": "https://" + ".".join(["abcdefghi"] * 26) + ".example",
    "label starts with hyphen": "http://-worker.example",
    "label ends with hyphen": "http://worker-.example",
    "empty label": "http://worker..example",
    "trailing dot": "http://worker.example.",
    "underscore": "http://worker_1.example",
    "numeric last label": "http://worker.123",
    "short ipv4": "http://127.1",
    "hex ipv4": "http://0x7f.0.0.1",
    "octal ipv4": "http://0177.0.0.1",
    "ipv4 out of range": "http://256.0.0.1",
    "five-part ipv4": "http://1.2.3.4.5",
    "integer host": "http://2130706433",
    "bare ipv6": "http://::1:8600",
    "ipv6 with zone": "http://[fe80::1%25eth0]:8600",
    "bad ipv6": "http://[::g]:8600",
    "unclosed bracket": "http://[::1:8600",
    "junk after bracket": "http://[::1]x:8600",
    "bad percent": "http://worker.example/%zz",
    "short percent": "http://worker.example/%4",
    "path with quote": 'http://worker.example/"x"',
    "path with angle bracket": "http://worker.example/<x>",
    "too long": "http://worker.example/" + "x" * MAX_URL_BYTES,
}


@pytest.mark.parametrize("url", ACCEPTED)
def test_a_plain_base_url_is_accepted(url):
    check_blob_url(url)


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_a_malformed_blob_url_is_refused_with_its_own_code(url):
    with pytest.raises(InvalidBlobUrl) as raised:
        check_blob_url(url)
    assert raised.value.code == 42 and raised.value.codespace == "market" and "blob_url" in str(raised.value)


def test_invalid_blob_url_is_an_invalid_worker_profile_with_a_code_of_its_own():
    assert issubclass(InvalidBlobUrl, InvalidWorkerProfile) and InvalidBlobUrl.code != InvalidWorkerProfile.code


def test_the_length_limit_is_the_parameter_given():
    url = "http://worker.example/" + "x" * 30
    check_blob_url(url, limit=len(url))
    with pytest.raises(InvalidBlobUrl, match="longer than"):
        check_blob_url(url, limit=len(url) - 1)


# -- the address parsers agree with the standard library on the forms they accept ------------------------------
def accepted_by(parse, text: str) -> bool:
    """Whether the standard library's `parse` takes `text` as an address."""
    try:
        parse(text)
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789abcdef:.", max_size=45))
def test_the_ipv6_parser_agrees_with_ipaddress(text):
    assert is_ipv6_literal(text) == accepted_by(ipaddress.IPv6Address, text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=4, max_size=4))
def test_every_dotted_quad_is_an_ipv4_literal(octets):
    assert is_ipv4_literal(".".join(map(str, octets)))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789.", max_size=20))
def test_the_ipv4_parser_agrees_with_ipaddress(text):
    assert is_ipv4_literal(text) == accepted_by(ipaddress.IPv4Address, text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_string_is_either_accepted_or_refused_with_invalid_blob_url(text):
    for url in (text, "http://" + text, "https://worker.example/" + text):
        try:
            check_blob_url(url)
        except InvalidBlobUrl:
            pass


# -- through the chain -----------------------------------------------------------------------------------------
@pytest.fixture
def market(make_chain):
    return Market(make_chain(accounts=3, validators=1, params={"market": MARKET_PARAMS}))


@pytest.mark.parametrize("name", ["userinfo hiding the host", "port too large", "ipv6 with zone", "newline", "query"])
def test_register_and_update_refuse_a_malformed_blob_url_and_change_nothing(market, name):
    chain, worker = market.chain, market.workers[0]
    before = market_snapshot(chain)
    assert_fails(chain.deliver(worker, pb.MsgRegisterWorker(stake=STAKE, blob_url=REFUSED[name], hardware=HARDWARE)),
                 InvalidBlobUrl)
    assert market_snapshot(chain) == before
    assert chain.deliver(worker, pb.MsgRegisterWorker(stake=STAKE, blob_url="http://127.0.0.1:9000",
                                                      hardware=HARDWARE)).ok
    registered = market_snapshot(chain)
    assert_fails(chain.deliver(worker, pb.MsgUpdateWorker(blob_url=REFUSED[name])), InvalidBlobUrl)
    assert market_snapshot(chain) == registered


def test_the_market_parameter_bounds_the_registered_length(market):
    limit = MarketParams().max_blob_url_bytes
    assert "max_blob_url_bytes" not in MARKET_PARAMS and limit < MAX_URL_BYTES
    url = "https://worker.example/" + "x" * (limit - len("https://worker.example/") + 1)
    assert_fails(market.chain.deliver(market.workers[0], pb.MsgRegisterWorker(stake=STAKE, blob_url=url,
                                                                              hardware=HARDWARE)), InvalidBlobUrl)
