"""What every page's API shares: reading a JSON body, and turning a refusal into the JSON the page shows next to
the field it concerns (`{"error": ..., "field": ...}`, 400), so a page never has to parse a traceback."""

from __future__ import annotations

import json

from aiohttp import web

from trolly.wallet.amounts import parse_amount
from trolly.wallet.errors import InvalidAmountText, NodeUnreachable, ProofInvalid, WalletError, WrongPassword

MAX_JSON_BYTES = 64 << 10


class Refusal(Exception):
    """A request the console will not carry out: `field` names the form field to show the message beside."""

    def __init__(self, message: str, field: str = "", status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status

    def response(self) -> web.Response:
        return web.json_response({"error": str(self), "field": self.field}, status=self.status)


def refusal_of(error: WalletError, field: str = "") -> Refusal:
    """A wallet error as a refusal: a wrong password beside the password, an amount beside its field."""
    if isinstance(error, WrongPassword):
        return Refusal(f"{error}: nothing was signed", "password")
    return Refusal(str(error), field)


async def json_body(request: web.Request) -> dict:
    if request.content_length is not None and request.content_length > MAX_JSON_BYTES:
        raise Refusal("the request is too large")
    try:
        body = json.loads(await request.content.read(MAX_JSON_BYTES))
    except (ValueError, UnicodeDecodeError):
        raise Refusal("the request is not JSON") from None
    if not isinstance(body, dict):
        raise Refusal("the request must be a JSON object")
    return body


def password_field(body, field_id: str) -> str:
    """The request's keyring password ('' when none: a test keyring has none), kept as typed (spaces count);
    refused beside the form's field `field_id` when it is not text."""
    password = body.get("password") or ""
    if not isinstance(password, str):
        raise Refusal("the password must be text", field_id)
    return password


def text_field(body, name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Refusal(f"{name.replace('_', ' ')} is required", name)
    if not isinstance(value, str):
        raise Refusal(f"{name.replace('_', ' ')} must be text", name)
    return value.strip()


def whole_field(body, name: str, low: int, high: int, default: int | None = None) -> int:
    """A whole number in [low, high] from a JSON body or a query (as text or a number)."""
    value = body.get(name, default)
    text = str(value).strip() if value is not None else ""
    if not text.isdigit() or not low <= int(text) <= high:
        raise Refusal(f"{name.replace('_', ' ')} must be a whole number from {low} to {high}", name)
    return int(text)


def amount_field(body, name: str) -> int:
    """An amount as the CLI takes it (`50trl`, `1500000utrl`), parsed by the wallet's own `parse_amount`."""
    try:
        return parse_amount(text_field(body, name), what=name.replace("_", " "))
    except InvalidAmountText as error:
        raise Refusal(str(error), name) from None


async def answer(work) -> web.Response:
    """`work`'s JSON, or its refusal: a wallet error beside no field, the node down as 503, an answer whose proof
    does not hold as 502 (the node's fault, as the chain reads answer it)."""
    try:
        return web.json_response(await work)
    except Refusal as refusal:
        return refusal.response()
    except NodeUnreachable as error:
        return Refusal(f"the node is down: {error}", status=503).response()
    except ProofInvalid as error:
        return Refusal(str(error), status=502).response()
    except WalletError as error:
        return refusal_of(error).response()
