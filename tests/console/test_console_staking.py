"""The Network page's validator columns and the Wallet page's delegation actions (aiohttp's test client) against a
real `trolly-node dev` and a password-protected keyring holding the dev key (the only validator's operator) and a
second key funded by it: the validator's commission, delegator count, missed blocks and jail state as the chain's
queries answer them; delegate, undelegate and withdraw rewards each previewed, then signed with the password, and
read back through the chain; the chain's own refusal (undelegating more than is delegated) answered with its code
and log, nothing changed; a typo (no validator address) refused beside its field before anything is signed."""

from __future__ import annotations

import pytest

from console_helpers import DEV_ADDRESS, PASSWORD, file_keyring, get_json as get, guarded_post as post, with_console
from dev_node import dev_node, send_included
from trolly.chain.crypto import encode_address
from trolly.chain.hd import COIN_TYPE, DEV_MNEMONIC, dev_key
from trolly.wallet.keyring import WEAKEST_ACCEPTED, Keyring
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.rpc import RpcClient
from trolly.wallet.txbuilder import send_message

FRIEND = dev_key(1)
FRIEND_ADDRESS = encode_address(FRIEND.address)
FUNDS = 50_000_000


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-staking")
    home = file_keyring(tmp / "wallet")
    Keyring(home, "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).recover(
        "friend", DEV_MNEMONIC, f"m/44'/{COIN_TYPE}'/0'/0'/1'")
    with dev_node(tmp / "node") as url:
        send_included(url, dev_key(0), send_message(FRIEND.address, FUNDS))
        yield url, home


def console(site, check):
    url, home = site
    return with_console(url, check, home=home)




def read(site, path: str) -> dict:
    async def check(client):
        status, body = await get(client, path)
        assert status == 200, body
        return body

    return console(site, check)


def preview_and_sign(site, body: dict):
    """The preview's status and answer, then the signed transaction's (the sign step only after the preview)."""
    async def check(client):
        previewed = await post(client, "/api/wallet/preview", body)
        if previewed[0] != 200:
            return previewed, None
        return previewed, await post(client, "/api/wallet/sign", {**body, "password": PASSWORD, "confirmed": True})

    return console(site, check)


def validator_row(site) -> dict:
    (row,) = read(site, "/api/network")["validators"]
    return row


def friend(site) -> dict:
    return next(k for k in read(site, "/api/wallet")["keys"] if k["name"] == "friend")


def chain(site, path: str):
    with RpcClient(site[0], timeout=10) as client:
        return client.query_json(path)


def test_the_network_page_shows_commission_delegators_missed_blocks_and_jail_state(site):
    row = validator_row(site)
    detail = chain(site, f"/validator/{DEV_ADDRESS}")
    liveness = chain(site, f"/signing_info/{DEV_ADDRESS}")
    assert row["operator"] == DEV_ADDRESS
    assert (row["commission_rate"], row["max_rate"], row["max_change_rate"]) == (
        detail["commission_rate"], detail["max_rate"], detail["max_change_rate"])
    assert row["delegators"] == detail["delegators"] == 1  # the operator's own bond
    assert row["self_bond"] == detail["self_bond"] > 0
    assert row["signed_blocks_window"] == liveness["signed_blocks_window"] > 0
    assert 0 <= row["missed_blocks"] <= row["max_missed_blocks"]
    assert (row["jailed"], row["jailed_until"], row["tombstoned"]) == (False, 0, False)
    assert row["proof"]["note"].startswith("proved at height")


def test_delegate_undelegate_and_withdraw_are_previewed_signed_and_seen_on_the_chain(site):
    wallet = read(site, "/api/wallet")
    assert [v["operator"] for v in wallet["validators"]] == [DEV_ADDRESS]
    assert friend(site)["delegations"]["total"] == 0

    (status, shown), (signed_status, sent) = preview_and_sign(
        site, {"action": "delegate", "key": "friend", "validator": DEV_ADDRESS, "amount": "3trl"})
    assert status == 200, shown
    (message,) = shown["tx"]["messages"]
    assert message["type"].endswith("MsgDelegate") and shown["tx"]["signer"] == FRIEND_ADDRESS
    assert signed_status == 200 and sent["code"] == 0, sent
    assert friend(site)["delegations"]["delegations"][0]["amount"] == 3_000_000
    assert validator_row(site)["delegators"] == 2

    (status, _), (signed_status, sent) = preview_and_sign(
        site, {"action": "undelegate", "key": "friend", "validator": DEV_ADDRESS, "amount": "1trl"})
    assert status == 200 and signed_status == 200 and sent["code"] == 0, sent
    assert chain(site, f"/delegations/{FRIEND_ADDRESS}")["total"] == 2_000_000
    assert chain(site, f"/unbonding/{FRIEND_ADDRESS}")["total"] == 1_000_000

    before = int(chain(site, f"/account/{FRIEND_ADDRESS}")["balance"])
    (status, shown), (signed_status, sent) = preview_and_sign(
        site, {"action": "withdraw", "key": "friend", "validator": DEV_ADDRESS})
    assert status == 200 and shown["tx"]["messages"][0]["type"].endswith("MsgWithdrawRewards"), shown
    assert signed_status == 200 and sent["code"] == 0, sent
    with RpcClient(site[0], timeout=10) as client:
        included = client.find_tx(sent["hash"])
    (withdrawn,) = [e for e in included.events if e.type == "withdraw_rewards"]
    after = int(chain(site, f"/account/{FRIEND_ADDRESS}")["balance"])
    assert after == before - shown["tx"]["fee"] + int(withdrawn.get("amount"))


def test_undelegating_more_than_is_delegated_is_the_chains_refusal_and_changes_nothing(site):
    """Attack: a page that takes back more stake than the key delegated. The chain refuses it (its code and log
    shown), and the delegation and the balance stay as they were but for nothing."""
    delegated = chain(site, f"/delegations/{FRIEND_ADDRESS}")["total"]
    balance = int(chain(site, f"/account/{FRIEND_ADDRESS}")["balance"])
    _, (status, refused) = preview_and_sign(
        site, {"action": "undelegate", "key": "friend", "validator": DEV_ADDRESS, "amount": "1000trl"})
    assert status == 400 and "code" in refused["error"].lower(), refused
    assert chain(site, f"/delegations/{FRIEND_ADDRESS}")["total"] == delegated
    assert int(chain(site, f"/account/{FRIEND_ADDRESS}")["balance"]) == balance


def test_a_delegation_without_a_validator_address_is_refused_beside_its_field(site):
    (status, refused), signed = preview_and_sign(
        site, {"action": "delegate", "key": "friend", "validator": "not-an-address", "amount": "1trl"})
    assert (status, refused["field"], signed) == (400, "validator", None)
    (status, refused), _ = preview_and_sign(site, {"action": "withdraw", "key": "friend"})
    assert (status, refused["field"]) == (400, "validator")
