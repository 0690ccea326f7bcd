"""The Governance page's API: every proposal with its tally (live while it votes), one proposal in full, and the
three actions (vote, deposit, submit a proposal) with the CLI's confirmation step, as the Wallet page's.

    GET  /api/gov                  gov params, the keyring's key names, the height, every proposal with its tally
    GET  /api/gov/proposals/<id>   one proposal (its record proven): its changes with each param's value now,
                                   deposits, tally, votes
    POST /api/gov/preview          the transaction as `trolly-wallet tx gov ...` shows it before asking to sign
    POST /api/gov/sign             the same, signed with the key unlocked by the password sent, and sent

The reads change nothing and start nothing; the actions are POSTs, which `security.py` admits only from the
console's own page with its session's CSRF token. The page must show the preview and have it confirmed before it
offers to sign, and a wrong password is refused before anything is signed (`signing.py`). The wallet's own
builders (`gov_messages.py`) turn what was typed into messages, so the page takes exactly what
`trolly-wallet tx gov` takes; the chain checks everything again, and its refusal (a vote outside the voting
period, an unknown param, a deposit on a decided proposal) comes back with its code and log, beside no field.
"""

from __future__ import annotations

from aiohttp import web

from trolly.wallet.amounts import parse_amount
from trolly.wallet.errors import InvalidAmountText, KeyNotFound, TxRejected, WalletError
from trolly.wallet.gov_messages import deposit_message, submit_proposal_message, vote_message
from trolly.wallet.gov_views import ProposalView
from trolly.wallet.market_answers import plain
from trolly.wallet.proofs import prove_answer
from trolly.wallet.proven_views import prove_params, prove_proposal, prove_proposals, prove_tally, prove_votes

from .config import CONFIG, ConsoleConfig
from .responses import Refusal, amount_field, answer, json_body, password_field, refusal_of, text_field, whole_field
from .signing import find_key, preview, sign_and_send

ACTIONS = ("vote", "deposit", "submit")
KINDS = ("params", "text")
"""What a submitted proposal is: param changes (one `SECTION.KEY=VALUE` a line), or text (no change)."""
ACTION_FIELD = {"vote": "option", "deposit": "amount", "submit": "deposit"}
"""The form field beside which an action's own refusals (not the chain's) are shown."""
MAX_PROPOSAL_ID = 2**64 - 1


def add_routes(app: web.Application, client_key: web.AppKey, read) -> None:
    """Register the routes; `read(request, reading)` is the server's wrapper of a node reading (503 when the
    node is down, 404 for a proposal the chain does not have)."""

    async def overview(request: web.Request) -> web.Response:
        return await read(request, gov_overview(request.app[client_key], request.app[CONFIG]))

    async def detail(request: web.Request) -> web.Response:
        proposal_id = int(request.match_info["number"])
        return await read(request, proposal_detail(request.app[client_key], request.app[CONFIG], proposal_id))

    async def preview_route(request: web.Request) -> web.Response:
        return await answer(_preview(request, request.app[client_key]))

    async def sign_route(request: web.Request) -> web.Response:
        return await answer(_sign(request, request.app[client_key]))

    app.router.add_get("/api/gov", overview)
    app.router.add_get("/api/gov/proposals/{number:\\d{1,20}}", detail)
    app.router.add_post("/api/gov/preview", preview_route)
    app.router.add_post("/api/gov/sign", sign_route)


async def gov_overview(client, config: ConsoleConfig) -> dict:
    """Gov params, the height, the keyring's key names (for the forms) and every proposal with its tally, each
    proven (`proof`: the params', the listing's; each live tally its own)."""
    height = (await client.status()).latest_block_height
    params = await prove_answer(client, "/params/gov")
    listed, listing = await prove_proposals(client)
    proposals = [{**p.to_answer(), "tally": await _tally(client, p)} for p in listed]
    return {"height": height, "params": params.answer, "keys": _key_names(config), "proposals": proposals,
            "proof": listing.proof_json(), "params_proof": params.proof_json()}


async def proposal_detail(client, config: ConsoleConfig, proposal_id: int) -> dict:
    """One proposal: each change beside its param's value now, deposits (while it takes them), tally, votes. The
    proposal with its deposits is proven (`proof`: `proved at height H`), and so are the params, the votes and the
    tally (each answer's own `proof`); a proof that fails is the server's 502."""
    proposal, deposits, proven = await prove_proposal(client, proposal_id)
    params, params_proven = await prove_params(client)
    votes, votes_proven = await prove_votes(client, proposal_id)
    height = (await client.status()).latest_block_height
    changes = [{**plain(c), "current": params.get(c.section, {}).get(c.key)} for c in proposal.changes]
    return {**proposal.to_answer(), "changes": changes, "deposits": [plain(d) for d in deposits],
            "votes": [plain(v) for v in votes], "votes_proof": votes_proven.proof_json(),
            "tally": await _tally(client, proposal), "params": params.get("gov", {}),
            "params_proof": params_proven.proof_json(), "height": height,
            "keys": _key_names(config), "proof": proven.proof_json()}


async def _tally(client, proposal: ProposalView) -> dict | None:
    """The live tally while it votes (with what it would decide now), the final one once decided, None before."""
    if proposal.status == "deposit_period":
        return None
    if proposal.status == "voting_period":
        tally, proven = await prove_tally(client, proposal.id)
        return {**tally.to_answer(), "proof": proven.proof_json()}
    return {"proposal_id": proposal.id, "status": proposal.status, "final": True,
            "tally": plain(proposal.final_tally) if proposal.final_tally else None, "outcome": proposal.outcome}


def _key_names(config: ConsoleConfig) -> list[str]:
    return [info.name for info in config.keyring().list()]


def _messages(body: dict) -> list:
    action = body.get("action")
    if action not in ACTIONS:
        raise Refusal(f"choose an action: {', '.join(ACTIONS)}", "action")
    try:
        if action == "vote":
            return [vote_message(_proposal_id(body), text_field(body, "option"))]
        if action == "deposit":
            return [deposit_message(_proposal_id(body), amount_field(body, "amount"))]
        return [_proposal_message(body)]
    except WalletError as error:  # a typo caught before anything is signed: shown beside its field
        raise Refusal(str(error), ACTION_FIELD[action]) from None


def _proposal_id(body: dict) -> int:
    return whole_field(body, "proposal_id", 1, MAX_PROPOSAL_ID)


def _proposal_message(body: dict):
    kind = body.get("kind")
    if kind not in KINDS:
        raise Refusal("choose what the proposal is: param changes or text", "kind")
    title = text_field(body, "title")
    summary = body.get("summary") or ""
    if not isinstance(summary, str):
        raise Refusal("the summary must be text", "summary")
    changes = _change_lines(body.get("changes")) if kind == "params" else []
    try:
        deposit = parse_amount(str(body.get("deposit") or "0"), allow_zero=True, what="deposit")
    except InvalidAmountText as error:
        raise Refusal(str(error), "deposit") from None
    try:
        return submit_proposal_message(title, summary.strip(), changes, deposit)
    except WalletError as error:
        raise Refusal(str(error), "changes") from None


def _change_lines(text) -> list[str]:
    """The non-blank lines of the changes box; at least one for a proposal of param changes."""
    if text is not None and not isinstance(text, str):
        raise Refusal("the changes must be text, one SECTION.KEY=VALUE a line", "changes")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise Refusal("write at least one change, one SECTION.KEY=VALUE a line (e.g. market.validator_fee_bps=300),"
                      " or choose a text proposal", "changes")
    return lines


def _key(body: dict, config: ConsoleConfig) -> str:
    """The name of the keyring's key that signs, refused beside the key field when the keyring has none such."""
    name = text_field(body, "key")
    try:
        return find_key(config, name).name
    except KeyNotFound as error:
        raise Refusal(str(error), "key") from None


async def _preview(request: web.Request, client) -> dict:
    config = request.app[CONFIG]
    body = await json_body(request)
    messages = _messages(body)
    try:
        return {"tx": await preview(client, config, _key(body, config), messages)}
    except WalletError as error:
        raise refusal_of(error, ACTION_FIELD[body["action"]]) from None


async def _sign(request: web.Request, client) -> dict:
    config = request.app[CONFIG]
    body = await json_body(request)
    messages = _messages(body)
    if body.get("confirmed") is not True:
        raise Refusal("confirm the transaction first (the preview's Confirm step)", "confirm")
    password = password_field(body, "password")
    try:
        outcome, _ = await sign_and_send(client, config, _key(body, config), password, messages)
    except TxRejected as error:  # the chain's refusal: its code and log, about the action as a whole
        raise Refusal(str(error)) from None
    except WalletError as error:
        raise refusal_of(error, ACTION_FIELD[body["action"]]) from None
    submitted = next((e for e in outcome.included.events if e.type == "proposal_submitted"), None)
    return {**outcome.to_json(), "proposal_id": int(submitted.get("proposal_id")) if submitted else None}
