"""Accounts and the small named verbs that change balances.

An account is (balance, nonce, public key), stored as two big-endian u64s followed by the 32-byte ed25519 public
key once the chain knows it. The chain learns an account's key as Cosmos SDK's auth module does: from the
first transaction the account signs (the ante handler records it, `chain/ante.py`), or from genesis
(`accounts[i].pub_key`); an address is a hash of its key, so a recorded key never changes. Others read it to
seal data to the account (a private task's data key, docs/privacy.md) without waiting for it to sign anything.

An account with zero balance, zero nonce and no known key is deleted rather than stored; one with a non-zero
nonce is kept even when empty, so its old transactions can never be replayed. Total supply is tracked under its
own key and changes only by `burn` (and genesis).
"""

from __future__ import annotations

from typing import NamedTuple

from . import keys
from .codec import U64_MAX, decode_u64, encode_u64
from .errors import InsufficientFunds, InvalidAmount
from .state import State


class Account(NamedTuple):
    """Immutable; a named tuple rather than a dataclass because every transaction builds several."""

    balance: int = 0
    nonce: int = 0
    pub_key: bytes = b""
    """The account's ed25519 public key (32 bytes), or empty while the chain has not seen it."""


def encode_account(account: Account) -> bytes:
    """Stored form: balance then nonce, big-endian u64 each, then the public key when known (what a Merkle
    proof of an account commits to)."""
    return account.balance.to_bytes(8, "big") + account.nonce.to_bytes(8, "big") + account.pub_key


def decode_account(raw: bytes) -> Account:
    return Account(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:16], "big"), raw[16:])


_EMPTY = Account()
# get_account and set_account inline account_key, decode_account and encode_account: they run several
# times per transaction (tests hold the stored form to encode_account).


def get_account(state: State, address: bytes) -> Account:
    raw = state.get(keys.ACCOUNT + address)
    if raw is None:
        return _EMPTY
    return Account(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:16], "big"), raw[16:])


def set_account(state: State, address: bytes, account: Account) -> None:
    key = keys.ACCOUNT + address
    if account.balance == 0 and account.nonce == 0 and not account.pub_key:
        state.delete(key)
    else:
        state.set(key, account.balance.to_bytes(8, "big") + account.nonce.to_bytes(8, "big") + account.pub_key)


def record_public_key(state: State, address: bytes, pub_key: bytes) -> None:
    """Remember `address`'s public key; the caller has checked that the key hashes to the address, so a key
    recorded before is this same key."""
    account = get_account(state, address)
    if account.pub_key != pub_key:
        set_account(state, address, account._replace(pub_key=pub_key))


def get_balance(state: State, address: bytes) -> int:
    return get_account(state, address).balance


def check_amount(amount: int, what: str = "amount") -> None:
    """Amounts are positive integers that fit in 64 bits."""
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0 or amount > U64_MAX:
        raise InvalidAmount(f"{what} must be an integer in 1..{U64_MAX}, got {amount!r}")


def add_balance(state: State, address: bytes, amount: int) -> None:
    # get_account and set_account inlined (no Account built): this runs for every fee and transfer; tests
    # hold it to the composition of the two.
    if amount == 0:
        return
    key = keys.ACCOUNT + address
    raw = state.get(key)
    if raw is None:
        balance, nonce, pub_key = 0, 0, b""
    else:
        balance, nonce, pub_key = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:16], "big"), raw[16:]
    new_balance = balance + amount
    if new_balance > U64_MAX:
        raise InvalidAmount("balance would exceed 64 bits")
    if new_balance == 0 and nonce == 0 and not pub_key:
        state.delete(key)
    else:
        state.set(key, new_balance.to_bytes(8, "big") + nonce.to_bytes(8, "big") + pub_key)


def sub_balance(state: State, address: bytes, amount: int) -> None:
    # get_account and set_account inlined, as in add_balance.
    if amount == 0:
        return
    key = keys.ACCOUNT + address
    raw = state.get(key)
    if raw is None:
        balance, nonce, pub_key = 0, 0, b""
    else:
        balance, nonce, pub_key = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:16], "big"), raw[16:]
    if balance < amount:
        raise InsufficientFunds(f"balance {balance}utrl is less than {amount}utrl")
    new_balance = balance - amount
    if new_balance == 0 and nonce == 0 and not pub_key:
        state.delete(key)
    else:
        state.set(key, new_balance.to_bytes(8, "big") + nonce.to_bytes(8, "big") + pub_key)


def move_funds(state: State, sender: bytes, recipient: bytes, amount: int) -> None:
    """Move `amount` utrl; raises InsufficientFunds before changing anything."""
    sub_balance(state, sender, amount)
    add_balance(state, recipient, amount)


def get_supply(state: State) -> int:
    raw = state.get(keys.SUPPLY)
    return decode_u64(raw) if raw else 0


def set_supply(state: State, supply: int) -> None:
    state.set(keys.SUPPLY, encode_u64(supply))


def mint(state: State, address: bytes, amount: int) -> None:
    """Create tokens (genesis only)."""
    add_balance(state, address, amount)
    set_supply(state, get_supply(state) + amount)


def burn(state: State, address: bytes, amount: int) -> None:
    """Destroy tokens held by `address` (slashing burns part of what it takes)."""
    sub_balance(state, address, amount)
    set_supply(state, get_supply(state) - amount)


def iterate_accounts(state: State):
    """Every stored (address, Account), ascending by address."""
    for key, raw in state.iterate(keys.ACCOUNT):
        yield key[len(keys.ACCOUNT):], decode_account(raw)
