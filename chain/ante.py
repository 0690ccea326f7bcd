"""Checks and charges that come before a transaction's messages run (the "ante handler").

Stateless part (`check_tx_stateless`): size, chain id, signature, message count, known message types, each
message's own validation. Stateful part (`charge_fee_and_nonce`): the nonce must be the signer's next one,
and the fee, at least `min_fee + fee_per_byte x the tx's size`, moves to the fee collector; the first
transaction an account signs also records its public key in the account (as Cosmos SDK's auth ante handler
does), so anyone can seal data to it from then on. Both run before any message; if they fail the tx changes
nothing.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .accounts import Account, add_balance, get_account, set_account
from .codec import U64_MAX
from .crypto import address_from_pubkey, module_address, verify_signature
from .errors import InsufficientFee, InsufficientFunds, InvalidAmount, InvalidNonce, InvalidRequest, InvalidSignature
from .errors import TxDecodeError, UnknownMessage, WrongChainId
from .module import MessageRoute
from .params import AuthParams
from .state import State
from .tx import SignedTx, is_canonical, sign_bytes

FEE_COLLECTOR = module_address("fee_collector")
"""Where fees wait until the end of the block, when the distribution module pays them out."""


class CheckedTx(NamedTuple):
    """A transaction that passed `check_tx_stateless`, with the fields the stateful part reads taken out once.

    The memo of passed checks (`checked_txs`) keeps one per transaction bytes, so a transaction met again
    (the re-check, the proposal, FinalizeBlock) neither reads its protobuf fields nor hashes its key again."""

    tx: SignedTx
    messages: list[tuple[MessageRoute, Any]]
    signer: bytes
    """The signer's address (`tx.signer`)."""
    fee: int
    nonce: int
    minimum_fee: int
    """`params.minimum_fee(len(tx.raw))` under the params the check ran with (the memo keys entries by them)."""


def checked_tx(tx: SignedTx, messages: list[tuple[MessageRoute, Any]], params: AuthParams) -> CheckedTx:
    """The record of a transaction whose stateless checks passed, with its `messages` decoded."""
    body = tx.body
    return CheckedTx(tx, messages, address_from_pubkey(tx.pubkey), body.fee, body.nonce,
                     params.minimum_fee(len(tx.raw)))


def decode_messages(tx: SignedTx, routes: dict[str, MessageRoute]) -> list[tuple[MessageRoute, Any]]:
    decoded = []
    for any_msg in tx.body.messages:
        route = routes.get(any_msg.type_url)
        if route is None:
            raise UnknownMessage(f"unknown message type {any_msg.type_url!r}")
        try:
            message = route.message_type.FromString(any_msg.value)
        except Exception as exc:  # protobuf raises DecodeError or RuntimeError depending on backend
            raise TxDecodeError(f"cannot decode {any_msg.type_url}: {exc}") from None
        if not is_canonical(message, any_msg.value):
            raise TxDecodeError(
                f"{any_msg.type_url} is not canonically encoded (unknown fields, over-long varints or integers beyond 64 bits)"
            )
        route.validate(message)
        decoded.append((route, message))
    return decoded


def check_tx_stateless(
    tx: SignedTx, chain_id: str, params: AuthParams, routes: dict[str, MessageRoute],
    verify: Callable[[bytes, bytes, bytes], bool] = verify_signature,
) -> list[tuple[MessageRoute, Any]]:
    """Everything that can be checked without state; returns the decoded messages. `verify` checks the
    signature (`crypto.verify_signature`, or the same check with answers computed ahead by the caller)."""
    body = tx.body
    if body.chain_id != chain_id:
        raise WrongChainId(f"tx is for chain {body.chain_id!r}, this is {chain_id!r}")
    if len(tx.raw) > params.max_tx_bytes:
        raise TxDecodeError(f"tx is {len(tx.raw)} bytes, limit {params.max_tx_bytes}")
    if not body.messages:
        raise InvalidRequest("tx carries no messages")
    if len(body.messages) > params.max_messages_per_tx:
        raise InvalidRequest(f"tx carries {len(body.messages)} messages, limit {params.max_messages_per_tx}")
    if len(body.memo.encode()) > params.max_memo_bytes:
        raise InvalidRequest(f"memo longer than {params.max_memo_bytes} bytes")
    if body.fee > U64_MAX:
        raise InvalidAmount("fee beyond 64 bits")
    if not verify(tx.pubkey, sign_bytes(tx.body_bytes), tx.signature):
        raise InvalidSignature("signature does not verify for this public key and body")
    return decode_messages(tx, routes)


def charge_fee_and_nonce(state: State, checked: CheckedTx, params: AuthParams) -> None:
    signer = checked.signer
    fee = checked.fee
    account = get_account(state, signer)
    if checked.nonce != account.nonce:
        raise InvalidNonce(f"nonce {checked.nonce} is not the account's next nonce {account.nonce}")
    if fee < checked.minimum_fee:
        raise InsufficientFee(f"fee {fee}utrl is below the minimum {checked.minimum_fee}utrl = {params.min_fee}utrl + "
                              f"{params.fee_per_byte}utrl x {len(checked.tx.raw)} bytes")
    if account.balance < fee:
        raise InsufficientFunds(f"balance {account.balance}utrl cannot pay the fee {fee}utrl")
    # One read and one write of the signer's account: fee out, nonce up and (on its first signature) its public
    # key recorded together. The signer's address is a hash of this key, so a recorded key is always this one.
    pub_key = account.pub_key or checked.tx.pubkey
    set_account(state, signer, Account(account.balance - fee, account.nonce + 1, pub_key))
    add_balance(state, FEE_COLLECTOR, fee)
