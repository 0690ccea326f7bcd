"""Who may drive the console, over HTTP against a real `trolly-node dev` holding a running task (issue 32 item 5):
only a browser that opened the address with the access token gets a session; without one every route refuses
(another local user, another site); GETs start and fetch nothing; sessions are bounded and expire; every answer
forbids framing."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from console_helpers import access_token, busy_node, csrf_token, own_origin, with_console
from trolly.console.access import ACCESS, Access, Sessions
from trolly.console.config import ConsoleConfig
from trolly.console.security import CSRF_HEADER, SESSION_COOKIE
from trolly.console.server import CHARTS, make_app


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with busy_node(tmp_path_factory.mktemp("console-access")) as busy:
        yield busy


def stranger(client) -> aiohttp.ClientSession:
    """Another client of the same console, with cookies of its own: another local user, or another site's page."""
    return aiohttp.ClientSession(base_url=str(client.make_url("/")), cookie_jar=aiohttp.CookieJar(unsafe=True))


def test_without_a_session_every_route_refuses_and_no_session_is_handed_out(node):
    """Attack: any local user (or page) asked `GET /api/session` for a CSRF token; sessions were made for every
    cookieless request. Now the page, the bundle and the API all answer 403 and set no cookie."""

    async def check(client):
        answers = {}
        async with stranger(client) as other:
            for path in ("/", "/assets/app.js", "/api/session", "/api/network", "/api/events", "/api/wallet",
                         f"/api/tasks/{node.task_id}", "/?token=not-the-token"):
                async with other.get(path, allow_redirects=False) as response:
                    answers[path] = (response.status, response.headers.getall("Set-Cookie", []),
                                     await response.text())
            cookies = len(other.cookie_jar)
        return answers, cookies

    answers, cookies = with_console(node.url, check)
    assert {path: status for path, (status, _, _) in answers.items()} == {path: 403 for path in answers}
    assert all(set_cookie == [] for _, set_cookie, _ in answers.values()) and cookies == 0
    assert "open that address again" in answers["/"][2] and "not this console's access token" in answers[
        "/?token=not-the-token"][2]


def test_the_access_token_opens_a_session_and_leads_to_the_address_without_it(node):
    """The printed address opens an HttpOnly, SameSite=Strict session and redirects to the same page without the
    token; the token is refused on anything but a GET."""

    async def check(client):
        token = access_token(client)
        async with stranger(client) as person:
            posted = await person.post("/", params={"token": token}, headers={"Origin": own_origin(client)})
            opened = await person.get("/", params={"token": token, "x": "1"}, allow_redirects=False)
            cookie = opened.cookies[f"{SESSION_COOKIE}_{client.server.port}"]
            session = await person.get("/api/session")
            return posted.status, opened.status, opened.headers["Location"], cookie, session.status

    posted, opened, location, cookie, session = with_console(node.url, check)
    assert posted == 403 and opened == 303 and location == "/?x=1" and session == 200
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/"


def test_a_local_user_without_the_token_cannot_stop_the_worker_even_with_a_forged_origin(node):
    """Attack: a local user got a session token from /api/session, set `Origin` by hand and posted
    /api/compute/stop (the worker then misses its round and pays the penalty). Now refused before any handler."""

    async def check(client):
        async with stranger(client) as local_user:
            session = await local_user.get("/api/session")
            forged = {"Origin": own_origin(client), CSRF_HEADER: "guessed"}
            stop = await local_user.post("/api/compute/stop", json={}, headers=forged)
            start = await local_user.post("/api/compute/start", json={"key": "dev", "password": ""}, headers=forged)
            return session.status, stop.status, (await stop.json())["error"], start.status

    session, stop, reason, start = with_console(node.url, check)
    assert (session, stop, start) == (403, 403, 403) and "open that address again" in reason


def test_a_cross_site_get_of_a_chart_or_a_model_starts_and_fetches_nothing(node, tmp_path):
    """Attack: an `<img src=http://127.0.0.1:8547/api/tasks/N/chart>` on any site started a chart job (which
    downloaded the task's dataset and built its model), and `/model` downloaded the model. Now a GET reads what is
    there (even from the console's own session), and only the page's guarded POST starts the job."""
    home = tmp_path / "console-home"

    async def check(client):
        async with stranger(client) as site:  # a cross-site <img> sends no SameSite=Strict cookie
            foreign = [(await site.get(f"/api/tasks/{node.task_id}/{what}")).status for what in ("chart", "model")]
        own_chart = await client.get(f"/api/tasks/{node.task_id}/chart")
        own_model = await client.get(f"/api/tasks/{node.task_id}/model")
        started_by_gets = dict(client.server.app[CHARTS].charts)
        headers = {"Origin": own_origin(client), CSRF_HEADER: await csrf_token(client)}
        started = await client.post(f"/api/tasks/{node.task_id}/chart", headers=headers)
        return (foreign, own_chart.status, await own_chart.json(), own_model.status, started_by_gets,
                started.status, set(client.server.app[CHARTS].charts))

    foreign, chart_status, chart, model_status, started_by_gets, started, charted = with_console(
        node.url, check, home=home)
    assert foreign == [403, 403]
    assert chart_status == 200 and chart["state"] == "idle" and chart["points"] == [] and started_by_gets == {}
    assert model_status == 404 and not (home / "console" / "models").exists() and not (home / "console" / "charts").exists()
    assert started == 200 and charted == {node.task_id}  # the page's own POST does start it


def test_sessions_are_bounded_and_expire(node):
    """Sessions were made per cookieless request and never expired. Now the least recently used goes first past
    the bound, and a session ends when idle too long or too old, used or not."""
    now = [0.0]
    access = Access(sessions=Sessions(limit=2, idle_seconds=100, lifetime_seconds=250, clock=lambda: now[0]))

    async def opened(client) -> aiohttp.ClientSession:
        person = stranger(client)
        await person.get("/", params={"token": access_token(client)}, allow_redirects=False)
        return person

    async def status(person) -> int:
        return (await person.get("/api/session")).status

    async def check(client):
        first, second = await opened(client), await opened(client)
        now[0] = 10.0
        assert await status(first) == 200  # first is now the most recently used
        third = await opened(client)
        evicted = [await status(person) for person in (first, second, third)]
        now[0] = 150.0  # 140 s after second's and third's last request, more than the idle bound
        idle = [await status(person) for person in (first, third)]
        fourth = await opened(client)
        ages = []
        for moment in (200.0, 280.0, 360.0, 420.0):  # used every 80 s, never idle; opened at 150
            now[0] = moment
            ages.append(await status(fourth))
        for person in (first, second, third, fourth):
            await person.close()
        return evicted, idle, ages

    evicted, idle, ages = with_console(node.url, check, signed_in=False, access=access)
    assert evicted == [200, 403, 200]
    assert idle == [403, 403]
    assert ages == [200, 200, 200, 403]  # 270 s after it was opened: past its lifetime


def test_every_answer_forbids_framing(node):
    """No frame-blocking header let any page frame the console and have its user click in it. Now every answer
    (a page, a file, the API, a refusal, a redirect, a missing route) says frame-ancestors 'none' and DENY."""

    async def check(client):
        responses = [await client.get(path, allow_redirects=False) for path in
                     ("/", "/assets/app.css", "/api/node", "/api/no-such-route", f"/?token={access_token(client)}")]
        async with stranger(client) as other:
            refused = await other.get("/api/node")
            responses.append(refused)
            return [(r.status, r.headers.get("Content-Security-Policy"), r.headers.get("X-Frame-Options"),
                     r.headers.get("Referrer-Policy")) for r in responses]

    answers = with_console(node.url, check)
    assert [status for status, *_ in answers][2:] == [200, 404, 303, 403]
    assert all(tuple(headers) == ("frame-ancestors 'none'", "DENY", "no-referrer") for _, *headers in answers), answers


def test_two_consoles_on_one_machine_keep_their_sessions_apart_in_one_browser(node, tmp_path):
    """A browser sends a host's cookies to every port: with one cookie name, opening a localnet's console signed
    the browser out of another console on 127.0.0.1. Each console's cookie names its port."""

    async def run():
        servers = [TestServer(make_app(ConsoleConfig(node.url, tmp_path / name)), host="127.0.0.1")
                   for name in ("one", "two")]
        for server in servers:
            await server.start_server()
        try:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
                for server in servers:
                    await browser.get(server.make_url("/"), params={"token": server.app[ACCESS].token})
                return [(await browser.get(server.make_url("/api/session"))).status for server in servers]
        finally:
            for server in servers:
                await server.close()

    assert asyncio.run(run()) == [200, 200]
