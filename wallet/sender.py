"""Sending transactions: plan (chain id, nonce, funds check), sign, broadcast, wait for the block.

This is the library behind `trolly-wallet tx ...`, and what the worker and verifier use to send their own
messages. It is async (on `AsyncRpcClient`); the CLI runs it through `RpcClient.run`.

The rules it implements:

- The chain id comes from the node (`status`) unless the caller names one.
- The nonce is the larger of the node's committed nonce and the one remembered in the `NonceCache`, which
  `plan` advances at once (a reservation), so two quick sends in a row, or two plans made before either is
  sent, get consecutive nonces. A plan that will not be sent is given back with `release` (a refused or
  cancelled one is released automatically). Because a mempool takes a signer's transactions in nonce order,
  `send` lets lower nonces planned by the same sender go first. If CheckTx still refuses the nonce (a
  remembered transaction was dropped), the entry is forgotten and the transaction re-signed once with the
  node's nonce.
- Funds are checked before signing: the fee plus what the messages move out must fit in the balance. CheckTx
  checks again (against the mempool's state); its "insufficient funds" is reported the same way.
- After `broadcast_tx_sync` accepts a transaction, it waits (with a timeout) until the transaction is in a
  block and reports height, code and log; a non-zero code there raises `TxRejected` (the fee was charged).

A service (worker, verifier) uses it like this, with the in-process nonce memory:

    async with AsyncRpcClient(node_url) as client:
        sender = TxSender(client, MemoryNonceCache())
        plan = await sender.plan(encode_address(key.address), [message])  # the chain's minimum fee
        outcome = await sender.send(key, plan, timeout=30)   # outcome.included.height, .code, .log
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass

from google.protobuf.message import Message

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.errors import ChainError, InsufficientFunds, InvalidNonce
from trolly.chain.tx import decode_tx

from .amounts import format_amount_both
from .errors import InsufficientBalance, QueryFailed, TxRejected, WalletError
from .nonces import NonceCache
from .rpc import AsyncRpcClient, BroadcastResult, TxResult
from .txbuilder import TxPlan, parse_address

CHAIN_CODESPACE = ChainError.codespace
INVALID_NONCE_CODE = InvalidNonce.code
INSUFFICIENT_FUNDS_CODE = InsufficientFunds.code
RESERVATION_HOLD_SECONDS = 10.0
"""How long a planned-but-unsent transaction keeps later ones from the same sender waiting for their turn."""


@dataclass(frozen=True)
class AccountState:
    """The chain's account record as `/account/<address>` answers it, read once here."""

    address: str
    balance: int
    nonce: int
    pub_key: bytes | None = None
    """The account's ed25519 public key, None while the chain has not seen it (no transaction signed, none in
    genesis)."""

    def to_json(self) -> dict:
        pub_key = base64.b64encode(self.pub_key).decode() if self.pub_key is not None else None
        return {"address": self.address, "balance": self.balance, "nonce": self.nonce, "pub_key": pub_key}

    @classmethod
    def from_json(cls, value: dict) -> AccountState:
        pub_key = value.get("pub_key")
        return cls(value["address"], int(value["balance"]), int(value["nonce"]),
                   base64.b64decode(pub_key) if pub_key is not None else None)


@dataclass(frozen=True)
class SendOutcome:
    """What happened to a transaction: accepted by CheckTx, and (if waited for) its result in a block."""

    hash: str
    nonce: int
    included: TxResult | None

    def to_json(self) -> dict:
        result = {"hash": self.hash, "nonce": self.nonce, "included": self.included is not None}
        if self.included is not None:
            result.update(
                height=self.included.height,
                code=self.included.code,
                codespace=self.included.codespace,
                log=self.included.log,
            )
        return result


async def fetch_account(client: AsyncRpcClient, address: str) -> AccountState:
    """The account record of `address` (committed state)."""
    return (await fetch_account_at(client, address))[1]


async def fetch_account_at(client: AsyncRpcClient, address: str) -> tuple[int, AccountState]:
    """The account record of `address` and the height the node answered it at; QueryFailed when it did not."""
    parse_address(address)  # a clear "invalid address" before any network traffic
    path = f"/account/{address}"
    result = await client.abci_query(path)
    if result.code != 0:
        raise QueryFailed(path, result.code, result.codespace, result.log)
    return result.height, AccountState.from_json(result.json())


def _raise_rejection(result: BroadcastResult) -> None:
    if result.codespace == CHAIN_CODESPACE and result.code == INSUFFICIENT_FUNDS_CODE:
        raise InsufficientBalance(f"insufficient funds (CheckTx code {result.code}): {result.log}")
    raise TxRejected(result.code, result.codespace, result.log, result.hash)


class TxSender:
    """Plans, signs and sends transactions for keys of one wallet home through one node."""

    def __init__(self, client: AsyncRpcClient, nonce_cache: NonceCache | None = None) -> None:
        self.client = client
        self.nonce_cache = nonce_cache
        self._chain_id: str | None = None
        self._fee_params: tuple[int, int] | None = None
        # Held from reading the nonce to reserving it, so concurrent plans in one process get distinct nonces.
        self._nonce_lock = asyncio.Lock()
        self._reserved: dict[tuple[str, int], float] = {}  # (signer, nonce) reserved by plans -> loop time

    async def fee_params(self) -> tuple[int, int]:
        """The chain's `(min_fee, fee_per_byte)`, read once per sender (params change only at genesis)."""
        if self._fee_params is None:
            auth = await self.client.query_json("/params/auth") or {}
            self._fee_params = (int(auth.get("min_fee", 0)), int(auth.get("fee_per_byte", 0)))
        return self._fee_params

    async def chain_id(self, given: str | None = None) -> str:
        if given:
            return given
        if self._chain_id is None:
            self._chain_id = (await self.client.status()).chain_id
            if not self._chain_id:
                raise WalletError(f"the node at {self.client.url} reports no chain id; pass --chain-id")
        return self._chain_id

    async def plan(
        self,
        signer: str,
        messages: list[Message],
        fee: int | None = None,
        *,
        chain_id: str | None = None,
        memo: str = "",
        nonce: int | None = None,
        check_funds: bool = True,
        reserve: bool = True,
    ) -> TxPlan:
        """The transaction body to sign, after checking that `signer` can pay for it.

        `fee` None pays the chain's minimum for this transaction (`min_fee + fee_per_byte x its size`, from the
        node's auth params); a given fee is used as it is (the chain refuses one below the minimum).

        With `reserve` (and a nonce cache), the nonce is remembered as used at once, so the next plan for the
        same signer gets the following one even if this transaction has not been broadcast yet. A reserved
        nonce that is never broadcast costs one retry later (see `send`); pass `reserve=False` for a dry run.
        """
        chain_id = await self.chain_id(chain_id)
        async with self._nonce_lock:
            account = await fetch_account(self.client, signer)
            if nonce is None:
                nonce = account.nonce
                if self.nonce_cache is not None:
                    nonce = self.nonce_cache.next_nonce(signer, account.nonce)
            else:
                reserve = False  # the caller chose the nonce: nothing of ours to reserve
            plan = TxPlan(chain_id, nonce, 0 if fee is None else fee, tuple(messages), memo)
            if fee is None:
                plan = plan.with_minimum_fee(*await self.fee_params())
            if check_funds and plan.spend > account.balance:
                raise InsufficientBalance(
                    f"insufficient funds: {signer} has {format_amount_both(account.balance)}, "
                    f"this transaction needs {format_amount_both(plan.spend)} (amounts plus fee)"
                )
            if reserve and self.nonce_cache is not None:
                self.nonce_cache.advance(signer, nonce + 1)
                now = asyncio.get_running_loop().time()
                # forget reservations abandoned long ago (a plan neither sent nor released), then add this one
                self._reserved = {k: t for k, t in self._reserved.items() if now - t < 10 * RESERVATION_HOLD_SECONDS}
                self._reserved[(signer, nonce)] = now
        return plan

    def release(self, signer: str, plan: TxPlan) -> None:
        """The planned transaction will not be sent: give its nonce back (if nothing was planned after it)."""
        if self.nonce_cache is not None and (signer, plan.nonce) in self._reserved:
            del self._reserved[(signer, plan.nonce)]
            self.nonce_cache.release(signer, plan.nonce)

    async def send(self, key: PrivateKey, plan: TxPlan, *, wait: bool = True, timeout: float = 30.0) -> SendOutcome:
        """Sign and broadcast `plan`; with `wait`, return once it is in a block (TxRejected if it failed there)."""
        signer, planned_nonce = encode_address(key.address), plan.nonce
        await self._wait_for_lower_nonces(signer, planned_nonce, timeout)
        try:
            accepted = await self.client.broadcast_tx_sync(plan.sign(key), check=False)
            if (accepted.code == INVALID_NONCE_CODE and accepted.codespace == CHAIN_CODESPACE
                    and self.nonce_cache is not None):
                # A remembered nonce can be stale (its transaction was dropped): start again from the node's.
                self.nonce_cache.forget(signer)
                node_nonce = (await fetch_account(self.client, signer)).nonce
                if node_nonce != plan.nonce:
                    plan = TxPlan(plan.chain_id, node_nonce, plan.fee, plan.messages, plan.memo)
                    min_fee, fee_per_byte = await self.fee_params()
                    if plan.fee < min_fee + fee_per_byte * plan.encoded_size():  # a longer nonce, a longer tx
                        plan = plan.with_minimum_fee(min_fee, fee_per_byte)
                    accepted = await self.client.broadcast_tx_sync(plan.sign(key), check=False)
            if accepted.code != 0:
                self.release(signer, plan)  # the nonce was not used: the next transaction may take it
                _raise_rejection(accepted)
            if self.nonce_cache is not None:
                self.nonce_cache.advance(signer, plan.nonce + 1)
        finally:
            self._reserved.pop((signer, planned_nonce), None)
        return await self._finish(accepted.hash, plan.nonce, wait, timeout)

    async def broadcast_signed(self, raw: bytes, *, wait: bool = True, timeout: float = 30.0) -> SendOutcome:
        """Broadcast transaction bytes signed elsewhere (`--generate-only`, offline signing, or `plan` + `sign`)."""
        try:
            tx = decode_tx(raw)
        except Exception as exc:  # ChainError subclasses; anything else is equally "not a transaction"
            raise WalletError(f"not a Trolly transaction: {exc}") from None
        signer, nonce = encode_address(tx.signer), tx.body.nonce
        await self._wait_for_lower_nonces(signer, nonce, timeout)
        try:
            accepted = await self.client.broadcast_tx_sync(raw, check=False)
            if accepted.code != 0:
                _raise_rejection(accepted)
            if self.nonce_cache is not None:
                self.nonce_cache.advance(signer, nonce + 1)
        finally:
            self._reserved.pop((signer, nonce), None)
        return await self._finish(accepted.hash, nonce, wait, timeout)

    async def _wait_for_lower_nonces(self, signer: str, nonce: int, timeout: float) -> None:
        """Mempools take a signer's transactions in nonce order: let lower nonces planned here go first.

        A plan that is neither sent nor released holds the queue for at most RESERVATION_HOLD_SECONDS after
        it was made (and never longer than `timeout`).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def lower_pending() -> bool:
            return any(s == signer and n < nonce and loop.time() - made < RESERVATION_HOLD_SECONDS
                       for (s, n), made in self._reserved.items())

        while lower_pending() and loop.time() < deadline:
            await asyncio.sleep(0.01)

    async def _finish(self, tx_hash: str, nonce: int, wait: bool, timeout: float) -> SendOutcome:
        if not wait:
            return SendOutcome(tx_hash, nonce, None)
        included = await self.client.wait_for_tx(tx_hash, timeout)
        if included.code != 0:
            raise TxRejected(included.code, included.codespace, included.log, included.hash, included.height)
        return SendOutcome(tx_hash, nonce, included)
