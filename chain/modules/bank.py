"""The bank module: balances, transfers, genesis accounts, the supply invariant, account queries."""

from __future__ import annotations

import base64
import binascii

from .. import keys
from ..accounts import get_account, get_supply, iterate_accounts, mint, record_public_key
from ..block import BlockContext
from ..codec import U64_MAX
from ..crypto import address_from_pubkey, decode_address, encode_address
from ..errors import InvalidAmount, InvalidRequest
from ..messages.send import process_send, validate_send
from ..module import InvariantBroken, MessageRoute, Module, QueryResult, QueryRoute
from ..params import AuthParams
from ..proto.bank_pb2 import MsgSend
from ..state import State


GENESIS_ACCOUNT_FIELDS = frozenset({"address", "balance", "pub_key"})


def init_bank_genesis(state: State, ctx: BlockContext, app_state: dict) -> None:
    """Fund `app_state["accounts"]`: a list of {"address": "trolly1...", "balance": int or decimal string,
    "pub_key": base64 ed25519 key (optional)}. A key is recorded in the account, so data can be sealed to an
    account that never signed a transaction (a genesis validator's operator); it must hash to the address."""
    accounts = app_state.get("accounts", [])
    if not isinstance(accounts, list):
        raise InvalidRequest("genesis accounts must be a list")
    for entry in accounts:
        if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
            raise InvalidRequest(f"genesis account must be an object with an \"address\" string, got {entry!r}")
        unknown = sorted(set(entry) - GENESIS_ACCOUNT_FIELDS)
        if unknown:
            raise InvalidRequest(f"genesis account {entry['address']} has unknown field(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(GENESIS_ACCOUNT_FIELDS))}")
        address = decode_address(entry["address"])
        balance = parse_genesis_amount(entry.get("balance", 0))
        if balance:
            mint(state, address, balance)
        if "pub_key" in entry:
            record_public_key(state, address, parse_genesis_public_key(entry["address"], address, entry["pub_key"]))


def parse_genesis_public_key(text_address: str, address: bytes, value: object) -> bytes:
    """The 32-byte ed25519 key that base64 `value` holds, refused unless its address is `address`."""
    try:
        if not isinstance(value, str):
            raise ValueError("not a string")
        pub_key = base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise InvalidRequest(f"genesis account {text_address}: pub_key must be a base64 string, "
                             f"got {value!r}") from None
    if len(pub_key) != 32:
        raise InvalidRequest(f"genesis account {text_address}: pub_key must be a 32-byte ed25519 key, "
                             f"got {len(pub_key)} bytes")
    if address_from_pubkey(pub_key) != address:
        raise InvalidRequest(f"genesis account {text_address}: pub_key {value} is the key of "
                             f"{encode_address(address_from_pubkey(pub_key))}, not of this address")
    return pub_key


def parse_genesis_amount(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, str) and not value.isdigit()):
        raise InvalidRequest(f"genesis amount must be a non-negative integer, got {value!r}")
    if int(value) < 0 or int(value) > U64_MAX:
        raise InvalidAmount(f"genesis amount must be a non-negative integer below 2^64, got {value!r}")
    return int(value)


def query_account(state: State, arg: str, data: bytes) -> QueryResult:
    address = decode_address(arg)
    account = get_account(state, address)
    pub_key = base64.b64encode(account.pub_key).decode() if account.pub_key else None
    return QueryResult(
        {"address": encode_address(address), "balance": account.balance, "nonce": account.nonce, "pub_key": pub_key},
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
        QueryRoute("/account", query_account, "balance, nonce and public key of /account/<address>"),
        QueryRoute("/supply", query_supply, "total supply in utrl"),
    ),
    params=(AuthParams,),
    init_genesis=init_bank_genesis,
    invariants=(check_supply_conserved, check_no_negative_balance),
)
