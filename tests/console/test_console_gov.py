"""The Governance page's API (aiohttp's test client) against a real `trolly-node dev` whose genesis has short gov
periods and a password-protected keyring holding the dev key (the only validator's operator, so its vote is the
whole bonded stake): a param-change proposal submitted, funded, voted on (a later vote replacing the earlier) and
applied, read back through the listing and the detail at each step; each action previewed before it is signed
and refused without the confirmation or with a wrong password; typos refused beside their field before anything
is signed; and the chain's own refusals (a vote outside the voting period, an unknown or out-of-range param, a
deposit on a decided proposal) answered with the chain's code and log, nothing changed."""

from __future__ import annotations

import asyncio

import pytest

from console_helpers import (DEV_ADDRESS, PASSWORD, file_keyring, get_json as get, guarded_post as post, own_origin,
                             with_console)
from dev_node import dev_home_with_params, dev_node

GOV = {"min_deposit": 2_000_000, "max_deposit_blocks": 600, "voting_period_blocks": 40}
"""A vote of 40 blocks (8 s at the node's 200 ms) leaves time for two votes and the reads between them."""
PROPOSAL = {"action": "submit", "key": "dev", "kind": "params", "title": "cheaper validators",
            "summary": "raise the validators' fee share", "changes": "market.validator_fee_bps=300\n",
            "deposit": "1trl"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-gov")
    home = file_keyring(tmp / "wallet")
    with dev_node(dev_home_with_params(tmp / "node", {"gov": GOV})) as url:
        yield url, home


def console(site, check):
    url, home = site
    return with_console(url, check, home=home)




def proposals(site) -> list:
    async def check(client):
        status, overview = await get(client, "/api/gov")
        assert status == 200, overview
        return overview["proposals"]

    return console(site, check)


def submitted(site, body: dict) -> int:
    async def check(client):
        status, sent = await post(client, "/api/gov/sign", {**body, "password": PASSWORD, "confirmed": True})
        assert status == 200 and sent["code"] == 0, sent
        return sent["proposal_id"]

    return console(site, check)


def signed(site, body: dict):
    async def check(client):
        return await post(client, "/api/gov/sign", {**body, "password": PASSWORD, "confirmed": True})

    return console(site, check)


def detail(site, proposal_id: int) -> dict:
    async def check(client):
        status, shown = await get(client, f"/api/gov/proposals/{proposal_id}")
        assert status == 200, shown
        return shown

    return console(site, check)


def test_a_param_change_is_previewed_funded_voted_on_and_applied_and_the_page_shows_each_step(site):
    async def before(client):
        preview = await post(client, "/api/gov/preview", PROPOSAL)
        unconfirmed = await post(client, "/api/gov/sign", {**PROPOSAL, "password": PASSWORD})
        wrong = await post(client, "/api/gov/sign", {**PROPOSAL, "password": "wrong", "confirmed": True})
        overview = await get(client, "/api/gov")
        return preview, unconfirmed, wrong, overview

    (status, preview), unconfirmed, wrong, (_, overview) = console(site, before)
    tx = preview["tx"]
    assert status == 200 and tx["signer"] == DEV_ADDRESS and tx["total_spend"] == 1_000_000 + tx["fee"]
    (message,) = tx["messages"]
    assert message["type"].endswith("MsgSubmitProposal") and message["fields"]["changes"] == [
        {"section": "market", "key": "validator_fee_bps", "value": "300"}]
    assert unconfirmed == (400, {"error": unconfirmed[1]["error"], "field": "confirm"})
    assert wrong[0] == 400 and wrong[1]["field"] == "password" and "nothing was signed" in wrong[1]["error"]
    assert overview["proposals"] == [] and overview["keys"] == ["dev"]
    assert overview["params"]["min_deposit"] == GOV["min_deposit"] and overview["params"]["quorum_bps"] > 0

    proposal_id = submitted(site, PROPOSAL)
    (listed,) = [p for p in proposals(site) if p["id"] == proposal_id]
    assert (listed["status"], listed["total_deposit"], listed["tally"]) == ("deposit_period", 1_000_000, None)
    assert listed["changes"] == [{"section": "market", "key": "validator_fee_bps", "value": 300}]
    assert listed["deposit_end_height"] == listed["submit_height"] + GOV["max_deposit_blocks"]

    status, early = signed(site, {"action": "vote", "key": "dev", "proposal_id": proposal_id, "option": "yes"})
    assert status == 400 and early["field"] == "" and "code 126 (gov)" in early["error"]
    assert "is not in its voting period: its deposits have not reached gov.min_deposit" in early["error"]

    status, funded = signed(site, {"action": "deposit", "key": "dev", "proposal_id": proposal_id, "amount": "1trl"})
    assert status == 200 and funded["code"] == 0, funded
    shown = detail(site, proposal_id)
    assert shown["status"] == "voting_period" and shown["total_deposit"] == GOV["min_deposit"]
    assert shown["deposits"] == [{"depositor": DEV_ADDRESS, "amount": GOV["min_deposit"]}]
    assert shown["changes"] == [{"section": "market", "key": "validator_fee_bps", "value": 300, "current": 200}]
    assert shown["tally"]["final"] is False and shown["tally"]["tally"]["voted"] == 0 and shown["votes"] == []

    assert signed(site, {"action": "vote", "key": "dev", "proposal_id": proposal_id, "option": "no"})[0] == 200
    against = detail(site, proposal_id)
    bonded = against["tally"]["tally"]["total_bonded"]
    assert bonded > 0 and against["tally"]["tally"]["no"] == bonded and against["tally"]["tally"]["yes"] == 0
    assert against["votes"] == [{"voter": DEV_ADDRESS, "option": "no"}]
    assert signed(site, {"action": "vote", "key": "dev", "proposal_id": proposal_id, "option": "yes"})[0] == 200
    (voting,) = [p for p in proposals(site) if p["id"] == proposal_id]
    assert (voting["tally"]["tally"]["yes"], voting["tally"]["tally"]["no"]) == (bonded, 0)
    assert voting["tally"]["outcome"].startswith("if it ended now: passed")

    decided = wait_until_decided(site, proposal_id)
    assert decided["status"] == "passed" and decided["tally"]["final"] is True
    assert decided["tally"]["tally"]["yes"] == bonded
    assert decided["changes"] == [{"section": "market", "key": "validator_fee_bps", "value": 300, "current": 300}]

    status, closed = signed(site, {"action": "deposit", "key": "dev", "proposal_id": proposal_id, "amount": "1trl"})
    assert status == 400 and "code 127 (gov)" in closed["error"] and "passed" in closed["error"]
    assert detail(site, proposal_id)["total_deposit"] == GOV["min_deposit"]


def wait_until_decided(site, proposal_id: int, timeout: float = 60.0) -> dict:
    async def check(client):
        for _ in range(int(timeout / 0.2)):
            _, shown = await get(client, f"/api/gov/proposals/{proposal_id}")
            if shown["status"] != "voting_period":
                return shown
            await asyncio.sleep(0.2)
        raise AssertionError(f"proposal {proposal_id} still voting after {timeout:.0f}s")

    return console(site, check)


@pytest.mark.parametrize("body, field, words", [
    ({"action": "veto"}, "action", "choose an action"),
    ({"action": "vote", "key": "dev", "proposal_id": "x", "option": "yes"}, "proposal_id", "whole number"),
    ({"action": "vote", "key": "dev", "proposal_id": 1, "option": "maybe"}, "option", "unknown vote option"),
    ({"action": "deposit", "key": "dev", "proposal_id": 1, "amount": "0trl"}, "amount", "amount"),
    ({"action": "deposit", "key": "nobody", "proposal_id": 1, "amount": "1trl"}, "key", "nobody"),
    ({**PROPOSAL, "kind": "poem"}, "kind", "param changes or text"),
    ({**PROPOSAL, "title": "  "}, "title", "title is required"),
    ({**PROPOSAL, "changes": "\n \n"}, "changes", "at least one change"),
    ({**PROPOSAL, "changes": "market.validator_fee_bps"}, "changes", "SECTION.KEY=VALUE"),
    ({**PROPOSAL, "deposit": "lots"}, "deposit", "invalid deposit"),
])
def test_a_typo_is_refused_beside_its_field_before_anything_is_signed(site, body, field, words):
    async def check(client):
        return await post(client, "/api/gov/preview", body), await post(
            client, "/api/gov/sign", {**body, "password": PASSWORD, "confirmed": True})

    before = len(proposals(site))
    for status, refused in console(site, check):
        assert status == 400 and refused["field"] == field and words in refused["error"], refused
    assert len(proposals(site)) == before


@pytest.mark.parametrize("change, code, words", [
    ("market.no_such_param=1", 122, "no_such_param"),
    ("market.validator_fee_bps=20000", 123, "validator_fee_bps"),
])
def test_a_proposal_the_chain_refuses_comes_back_with_its_code_and_log_and_adds_nothing(site, change, code, words):
    before = len(proposals(site))
    status, refused = signed(site, {**PROPOSAL, "changes": change})
    assert status == 400 and refused["field"] == "" and f"code {code} (gov)" in refused["error"]
    assert words in refused["error"]
    assert len(proposals(site)) == before


def test_a_text_proposal_lists_no_change(site):
    proposal_id = submitted(site, {**PROPOSAL, "kind": "text", "title": "a note", "changes": "ignored=1"})
    (listed,) = [p for p in proposals(site) if p["id"] == proposal_id]
    assert listed["changes"] == [] and listed["title"] == "a note"


def test_an_unknown_proposal_is_404_and_the_actions_need_the_session_and_its_csrf_token(site):
    async def check(client):
        missing = await client.get("/api/gov/proposals/999")
        no_token = await client.post("/api/gov/sign", json={**PROPOSAL, "password": PASSWORD, "confirmed": True},
                                     headers={"Origin": own_origin(client)})
        return missing.status, no_token.status

    before = len(proposals(site))
    assert console(site, check) == (404, 403)
    assert len(proposals(site)) == before

    async def stranger(client):
        return (await client.get("/api/gov")).status

    url, home = site
    assert with_console(url, stranger, home=home, signed_in=False) == 403
