"""The state transition: `init_chain`, `apply_block`, `apply_tx`, `check_tx` and `query`.

Reads like a spec: a block runs every module's begin-block hook, then each transaction (ante checks,
fee and nonce, then its messages all-or-nothing), then every end-block hook. Everything is a pure function
of the state handed in and the block; the caller (the ABCI adapter) decides what to persist.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Callable

from .ante import CheckedTx, check_tx_stateless, charge_fee_and_nonce, checked_tx
from .block import BlockContext, BlockEnv, BlockOutput, Event, TxResult, ValidatorUpdate
from .checked_txs import AnswersAhead, CheckedTxs
from .crypto import encode_address, verify_signature
from .errors import ChainError, InvalidRequest, UnexpectedFailure, UnknownQueryPath
from .listing_index import update_listing_indexes
from .module import MessageRoute, Module, QueryResult, QueryRoute
from .modules.bank import BANK
from .modules.distribution import DISTRIBUTION
from .modules.downtime import DOWNTIME
from .modules.gov import governance_module
from .modules.market import MARKET
from .modules.slashing import SLASHING
from .modules.staking import STAKING
from .param_rules import check_param_rules, current_params
from .params import AuthParams, get_params, params_from_json, params_to_json, set_params
from .state import State
from .tx import decode_tx

log = logging.getLogger("trolly.chain")

_BASE_MODULES: tuple[Module, ...] = (BANK, MARKET, SLASHING, DOWNTIME, STAKING, DISTRIBUTION)

_GOVERNED_PARAMS: tuple[type, ...] = tuple(p for m in _BASE_MODULES for p in m.params)

MODULES: tuple[Module, ...] = _BASE_MODULES + (governance_module(_GOVERNED_PARAMS),)
"""Every module, in hook order. Begin-block hooks run in this order, end-block hooks too. The task market
goes before SLASHING; SLASHING (evidence) before DOWNTIME, so a double sign tombstones a validator before its
missed blocks could jail it for less; STAKING (unbonding maturity, power updates) then DISTRIBUTION (fees) come
next, and governance ends the block: a passed proposal's params rule from the next block on, in every module alike."""


def _routes(modules: tuple[Module, ...]) -> dict[str, MessageRoute]:
    routes: dict[str, MessageRoute] = {}
    for module in modules:
        for route in module.messages:
            if route.type_url in routes:
                raise ValueError(f"message {route.type_url} registered twice")
            routes[route.type_url] = route
    return routes


def query_params(state: State, arg: str, data: bytes) -> QueryResult:
    """All params sections, or one with `/params/<section>`."""
    sections = {p.SECTION: params_to_json(get_params(state, p)) for p in PARAM_TYPES}
    if arg:
        if arg not in sections:
            raise InvalidRequest(f"unknown params section {arg!r}; known: {', '.join(sorted(sections))}")
        return QueryResult(sections[arg])
    return QueryResult(sections)


MESSAGE_ROUTES = _routes(MODULES)
PARAM_TYPES: tuple[type, ...] = tuple(p for m in MODULES for p in m.params)
"""Every params section (governance's own last); a proposal may change any of them."""
QUERY_ROUTES: tuple[QueryRoute, ...] = (QueryRoute("/params", query_params, "chain parameters"),) + tuple(
    q for m in MODULES for q in m.queries
)


def error_result(error: ChainError, events: list[Event] | None = None) -> TxResult:
    return TxResult(code=error.code, codespace=error.codespace, log=error.log, events=events or [])


def init_chain(state: State, env: BlockEnv, app_state: dict) -> list[ValidatorUpdate]:
    """Write genesis state; returns the initial validator set for CometBFT."""
    params_json = app_state.get("params", {})
    unknown = sorted(set(params_json) - {p.SECTION for p in PARAM_TYPES})
    if unknown:
        raise InvalidRequest(f"unknown params sections in genesis: {', '.join(unknown)}")
    for params_type in PARAM_TYPES:
        set_params(state, params_from_json(params_type, params_json.get(params_type.SECTION)))
    check_param_rules(current_params(state, PARAM_TYPES))
    ctx = BlockContext(env)
    for module in MODULES:
        if module.init_genesis is not None:
            module.init_genesis(state, ctx, app_state)
    update_listing_indexes(state)
    state.discard_journal()
    return [ValidatorUpdate(pubkey, power) for pubkey, power in sorted(ctx.validator_updates.items())]


def _verifier(ahead: AnswersAhead | None) -> Callable[[bytes, bytes, bytes], bool]:
    """The signature check, asking `ahead` first when answers were computed elsewhere (same answers)."""
    if ahead is None:
        return verify_signature

    def verify(pubkey: bytes, message: bytes, signature: bytes) -> bool:
        answer = ahead.answer(pubkey, hashlib.sha256(message).digest(), signature)
        return verify_signature(pubkey, message, signature) if answer is None else answer

    return verify


def check_stateless(raw: bytes, chain_id: str, params: AuthParams, checks: CheckedTxs | None = None,
                    ahead: AnswersAhead | None = None,
                    remember: bool = True, provisional: bool = False) -> CheckedTx:
    """Decode `raw` and run every check that needs no state (`ante.check_tx_stateless`); raises its ChainError.

    With `checks` (the node's memo of passed checks), bytes that passed before under the same chain id and
    params are not checked again: the answer would be the same (see `checked_txs`). A check that passes here
    is stored in `checks` unless `remember` is False (FinalizeBlock: its transactions are not met again);
    `provisional` stores it as met in a proposal only (ProcessProposal: see `checked_txs`)."""
    context = (chain_id, params)
    if checks is not None:
        remembered = checks.recall(raw, context)
        if remembered is not None:
            return remembered
    tx = decode_tx(raw, params.max_tx_bytes)
    checked = checked_tx(tx, check_tx_stateless(tx, chain_id, params, MESSAGE_ROUTES, _verifier(ahead)), params)
    if checks is not None and remember:
        checks.remember(raw, context, checked, provisional)
    return checked


def apply_tx(state: State, ctx: BlockContext, raw: bytes, checks: CheckedTxs | None = None,
             ahead: AnswersAhead | None = None, remember: bool = True) -> TxResult:
    """Execute one transaction. Failed ante: no effect. Failed message: fee and nonce stay charged.

    A transaction can only fail, never raise: a ChainError is its expected failure; anything else that checking
    or running it raises (a bug its bytes reached) fails it with `UnexpectedFailure`, rolled back the same way,
    so every node records the same result and no transaction can stop a node. `checks`, `ahead` and
    `remember` only change how fast the stateless checks answer (`check_stateless`), never what they answer."""
    params = ctx.auth_params
    if params is None:  # no message changes params (governance does, in end-block): one read serves the block
        params = ctx.auth_params = get_params(state, AuthParams)
    before_ante = state.snapshot()
    try:
        checked = check_stateless(raw, ctx.env.chain_id, params, checks, ahead, remember)
        charge_fee_and_nonce(state, checked, params)
    except ChainError as error:
        state.rollback(before_ante)
        return error_result(error)
    except Exception as exc:  # noqa: BLE001 - see the docstring: a tx must not raise
        state.rollback(before_ante)
        return error_result(_unexpected(exc, "checking the transaction"))

    signer = checked.signer
    recording = ctx.record_events
    if recording:  # the events as Event.of builds them, without its keyword dict
        sender = encode_address(signer)
        charged = [Event("tx", (("fee", str(checked.fee)), ("signer", sender), ("nonce", str(checked.nonce))))]
        events = list(charged)
    else:  # CheckTx: the answer carries no events, so none are built
        charged, events = [], []
    ctx.tx_events = events
    before_messages = state.snapshot()
    try:
        for route, message in checked.messages:
            if recording:
                events.append(Event("message", (("action", route.type_url), ("sender", sender))))
            route.process(state, ctx, signer, message)
    except ChainError as error:
        state.rollback(before_messages)
        return error_result(error, charged)
    except Exception as exc:  # noqa: BLE001 - see the docstring: a tx must not raise
        state.rollback(before_messages)
        return error_result(_unexpected(exc, "running the transaction's messages"), charged)
    finally:
        ctx.tx_events = None
    return TxResult(events=events)


def _unexpected(exc: Exception, where: str) -> UnexpectedFailure:
    log.error("a transaction reached a bug while %s; it fails with code %d", where, UnexpectedFailure.code,
              exc_info=exc)
    return UnexpectedFailure.from_exception(exc, where)


def apply_block(state: State, env: BlockEnv, txs: list[bytes], checks: CheckedTxs | None = None,
                ahead: AnswersAhead | None = None) -> BlockOutput:
    """Execute a whole block against `state` (mutated in place); nothing is persisted here.

    `checks` is the node's memo of passed stateless checks (`checked_txs`); `ahead`, if given, holds answers
    to the block's signature checks computed elsewhere (the ABCI adapter's signature checker process): told
    which transaction runs next, it answers or says it cannot, and the check happens here as always.
    Results never depend on either. A block's transactions are looked up in `checks` but not added to it:
    once the block is committed they are not checked again (the adapter forgets them at Commit), so storing
    the ones met here for the first time (a block this node never saw in CheckTx) would only cost time and
    leave more objects for the garbage collector to walk."""
    ctx = BlockContext(env)
    for module in MODULES:
        if module.begin_block is not None:
            module.begin_block(state, ctx)
    tx_results = []
    for index, raw in enumerate(txs):
        if ahead is not None:
            ahead.at(index)
        tx_results.append(apply_tx(state, ctx, raw, checks, ahead, remember=False))
        state.discard_journal()
    for module in MODULES:
        if module.end_block is not None:
            module.end_block(state, ctx)
    update_listing_indexes(state)
    state.discard_journal()
    updates = [ValidatorUpdate(pubkey, power) for pubkey, power in sorted(ctx.validator_updates.items())]
    return BlockOutput(tx_results=tx_results, events=ctx.events, validator_updates=updates)


def check_tx(state: State, env: BlockEnv, raw: bytes, checks: CheckedTxs | None = None,
             auth_params: AuthParams | None = None) -> TxResult:
    """Mempool admission against a mempool overlay: the tx must succeed whole, or it changes nothing.

    The result carries no events (nothing reads a CheckTx's events; FinalizeBlock's results carry them).
    `auth_params`, if given, must be `state`'s (no transaction changes them, so a caller checking many
    transactions against one overlay reads them once); without them they are read here."""
    ctx = BlockContext(env, auth_params=auth_params, record_events=False)
    marker = state.snapshot()
    result = apply_tx(state, ctx, raw, checks)
    if not result.ok:
        state.rollback(marker)
        if checks is not None:  # not admitted: its bytes will not be met again, so they take no room
            checks.forget((raw,))
    elif checks is not None:  # admitted: kept even if a proposal brought it first
        checks.admit(raw)
    return result


def check_tx_stateless_only(raw: bytes, chain_id: str, state: State, checks: CheckedTxs | None = None,
                            auth_params: AuthParams | None = None) -> TxResult:
    """What ProcessProposal can check without executing: decoding, chain id, signature, message shapes.
    `auth_params`, if given, must be `state`'s (as for `check_tx`); without them they are read here. A check
    that passes is remembered as provisional (`checked_txs`): a proposal alone does not admit a transaction."""
    params = auth_params if auth_params is not None else get_params(state, AuthParams)
    try:
        check_stateless(raw, chain_id, params, checks, provisional=True)
    except ChainError as error:
        return error_result(error)
    except Exception as exc:  # noqa: BLE001 - a tx must not raise (see apply_tx)
        return error_result(_unexpected(exc, "checking the transaction"))
    return TxResult()


def query(state: State, path: str, data: bytes = b"") -> QueryResult:
    """Answer a query path such as `/account/trolly1...`; raises UnknownQueryPath for anything unserved."""
    for route in QUERY_ROUTES:
        if path == route.path:
            return route.handler(state, "", data)
        if path.startswith(route.path + "/"):
            return route.handler(state, path[len(route.path) + 1:], data)
    raise UnknownQueryPath(f"unknown query path {path!r}; served: {', '.join(r.path for r in QUERY_ROUTES)}")


def check_invariants(state: State) -> None:
    """Run every module's invariants; raises InvariantBroken on the first that fails."""
    for module in MODULES:
        for invariant in module.invariants:
            invariant(state)
