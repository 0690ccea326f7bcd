"""The bank module: balances, transfers, genesis accounts, the supply invariant, account queries."""

from __future__ import annotations

from .. import keys
from ..accounts import get_account, get_supply, iterate_accounts, mint
from ..block import BlockContext
from ..codec import U64_MAX
from ..crypto import decode_address, encode_address
from ..errors import InvalidAmount, InvalidRequest
from ..messages.send import process_send, validate_send
from ..module import InvariantBroken, MessageRoute, Module, QueryResult, QueryRoute
from ..params import AuthParams
from ..proto.bank_pb2 import MsgSend
from ..state import State


def init_bank_genesis(state: State, ctx: BlockContext, app_state: dict) -> None:
    """Fund `app_state["accounts"]`: a list of {"address": "trolly1...", "balance": int or decimal string}."""
    accounts = app_state.get("accounts", [])
    if not isinstance(accounts, list):
        raise InvalidRequest("genesis accounts must be a list")
    for entry in accounts:
        if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
            raise InvalidRequest(f"genesis account must be an object with an \"address\" string, got {entry!r}")
        address = decode_address(entry["address"])
        balance = parse_genesis_amount(entry.get("balance", 0))
        if balance:
            mint(state, address, balance)


def parse_genesis_amount(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, str) and not value.isdigit()):
        raise InvalidRequest(f"genesis amount must be a non-negative integer, got {value!r}")
    if int(value) < 0 or int(value) > U64_MAX:
        raise InvalidAmount(f"genesis amount must be a non-negative integer below 2^64, got {value!r}")
    return int(value)


def query_account(state: State, arg: str, data: bytes) -> QueryResult:
    address = decode_address(arg)
    account = get_account(state, address)
    return QueryResult(
        {"address": encode_address(address), "balance": account.balance, "nonce": account.nonce},
        proof_key=keys.account_key(address),
    )


def query_supply(state: State, arg: str, data: bytes) -> QueryResult:
    return QueryResult({"supply": get_supply(state)}, proof_key=keys.SUPPLY)


def check_supply_conserved(state: State) -> None:
    """Total supply equals the sum of all balances (every token, staked or escrowed, sits in some account)."""
    total = sum(account.balance for _, account in iterate_accounts(state))
    if total != get_supply(state):
        raise InvariantBroken(f"sum of balances {total} != supply {get_supply(state)}")


def check_no_negative_balance(state: State) -> None:
    for address, account in iterate_accounts(state):
        if account.balance < 0 or account.nonce < 0:
            raise InvariantBroken(f"negative account {encode_address(address)}: {account}")


BANK = Module(
    name="bank",
    messages=(MessageRoute(MsgSend, validate_send, process_send),),
    queries=(
        QueryRoute("/account", query_account, "balance and nonce of /account/<address>"),
        QueryRoute("/supply", query_supply, "total supply in utrl"),
    ),
    params=(AuthParams,),
    init_genesis=init_bank_genesis,
    invariants=(check_supply_conserved, check_no_negative_balance),
)
