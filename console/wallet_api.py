"""The Wallet page's API: the keyring's keys with their balances, delegations and rewards, and send, stake (bond),
unbond, delegate, undelegate and withdraw rewards with the CLI's confirmation step.

    GET  /api/wallet              each key of the keyring: address, balance and nonce (its account proven:
                                  `proof`, `proved at height H`), its validator (if any), its delegations and
                                  pending rewards (not proven); and every validator a key may delegate to
    POST /api/wallet/preview      the transaction as `trolly-wallet tx ...` shows it before asking to sign
    POST /api/wallet/sign         the same, signed with the key unlocked by the password sent, and sent

A wrong password is refused before anything is signed (and the planned nonce given back); the page must show
the preview and have it confirmed before it offers to sign. The messages are the wallet's own builders, as
`trolly-wallet tx send|stake ...` builds them; the chain checks them again, and its refusal (undelegating more
than is delegated, delegating to an address that operates no validator) comes back with its code and log.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from trolly.wallet.errors import WalletError
from trolly.wallet.proofs import prove_answer
from trolly.wallet.proven_views import prove_delegations, prove_rewards, prove_validators
from trolly.wallet.txbuilder import bond_message, delegate_message, parse_address, send_message, unbond_message
from trolly.wallet.txbuilder import undelegate_message, withdraw_rewards_message

from .config import CONFIG, ConsoleConfig
from .responses import Refusal, amount_field, answer, json_body, password_field, refusal_of, text_field
from .signing import preview, sign_and_send

ACTIONS = ("send", "stake", "unbond", "delegate", "undelegate", "withdraw")
DELEGATION_ACTIONS = ("delegate", "undelegate", "withdraw")
"""The actions that name a validator (its operator address): `tx stake delegate|undelegate|withdraw-rewards`."""


def add_routes(app: web.Application, client_key: web.AppKey, read) -> None:
    """Register the routes; `read(request, reading)` is the server's wrapper of a node reading (a proof that does
    not hold: 502 with the reason)."""

    async def overview(request: web.Request) -> web.Response:
        return await read(request, _overview(request.app[client_key], request.app[CONFIG]))

    async def preview_route(request: web.Request) -> web.Response:
        return await answer(_preview(request, request.app[client_key]))

    async def sign_route(request: web.Request) -> web.Response:
        return await answer(_sign(request, request.app[client_key]))

    app.router.add_get("/api/wallet", overview)
    app.router.add_post("/api/wallet/preview", preview_route)
    app.router.add_post("/api/wallet/sign", sign_route)


async def _overview(client, config: ConsoleConfig) -> dict:
    """Every key's account, delegations and rewards, and the validator listing, proven, all at once (one block's
    wait per refresh, however many keys)."""
    infos = config.keyring().list()
    (listed, listing), accounts, delegations, rewards = await asyncio.gather(
        prove_validators(client),
        asyncio.gather(*(prove_answer(client, f"/account/{info.address}") for info in infos)),
        asyncio.gather(*(prove_delegations(client, info.address) for info in infos)),
        asyncio.gather(*(prove_rewards(client, info.address) for info in infos)))
    validators = {v.operator: v for v in listed}
    keys = []
    for info, account, (delegated, delegated_proof), (earned, earned_proof) in zip(infos, accounts, delegations,
                                                                                   rewards):
        validator = validators.get(info.address)
        keys.append({"name": info.name, "address": info.address, "balance": account.answer["balance"],
                     "nonce": account.answer["nonce"], "proof": account.proof_json(),
                     "validator": validator.to_answer() if validator else None,
                     "delegations": {**delegated.to_answer(), "proof": delegated_proof.proof_json()},
                     "rewards": {**earned.to_answer(), "proof": earned_proof.proof_json()}})
    choices = [{"operator": v.operator, "moniker": v.moniker, "jailed": v.jailed} for v in validators.values()]
    return {"keys": keys, "validators": choices, "validators_proof": listing.proof_json(),
            "keyring_backend": config.keyring_backend}


def _messages(body: dict, config: ConsoleConfig) -> list:
    action = body.get("action")
    if action not in ACTIONS:
        raise Refusal(f"choose an action: {', '.join(ACTIONS)}", "action")
    if action in DELEGATION_ACTIONS:
        return [_delegation_message(action, body)]
    amount = amount_field(body, "amount")
    if action == "send":
        return [send_message(_recipient(text_field(body, "to"), config), amount)]
    return [bond_message(amount) if action == "stake" else unbond_message(amount)]


def _delegation_message(action: str, body: dict):
    """`tx stake delegate|undelegate VALIDATOR AMOUNT` or `tx stake withdraw-rewards VALIDATOR`."""
    try:
        validator = parse_address(text_field(body, "validator"))
    except WalletError as error:
        raise Refusal(str(error), "validator") from None
    if action == "withdraw":
        return withdraw_rewards_message(validator)
    amount = amount_field(body, "amount")
    return delegate_message(validator, amount) if action == "delegate" else undelegate_message(validator, amount)


def _recipient(text: str, config: ConsoleConfig) -> bytes:
    """An address, or the name of a key of this keyring (as `tx send TO` takes either)."""
    keyring = config.keyring()
    try:
        if not text.lower().startswith("trolly1") and keyring.exists(text):
            return parse_address(keyring.get(text).address)
        return parse_address(text)
    except WalletError as error:
        raise Refusal(str(error), "to") from None


async def _preview(request: web.Request, client) -> dict:
    config = request.app[CONFIG]
    body = await json_body(request)
    messages = _messages(body, config)
    try:
        return {"tx": await preview(client, config, text_field(body, "key"), messages)}
    except WalletError as error:
        raise refusal_of(error, "amount") from None


async def _sign(request: web.Request, client) -> dict:
    config = request.app[CONFIG]
    body = await json_body(request)
    messages = _messages(body, config)
    if body.get("confirmed") is not True:
        raise Refusal("confirm the transaction first (the preview's Confirm step)", "confirm")
    password = password_field(body, "password")
    try:
        outcome, _ = await sign_and_send(client, config, text_field(body, "key"), password, messages)
    except WalletError as error:
        raise refusal_of(error, "amount") from None
    return outcome.to_json()
