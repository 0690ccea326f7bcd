"""Building, signing and describing the transactions a wallet sends.

A `TxPlan` is everything that goes into a transaction's body (chain id, nonce, fee, messages, memo); signing
it gives the wire bytes of `trolly.chain.tx` (the chain's own `build_tx`, so the wallet can never sign bytes
the chain would read differently). `describe_tx` turns signed bytes back into plain JSON, which is what the
confirmation prompt shows and what `tx broadcast` prints before sending a file.

Message kinds are registered in `MESSAGE_KINDS` with how to describe them and how much of the signer's
balance they spend, so other packages (the task market) add theirs with one `register_message_kind` call.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Callable

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message

from trolly.chain.crypto import PUBKEY_LENGTH, PrivateKey, address_from_pubkey, decode_address, encode_address
from trolly.chain.errors import ChainError, InvalidAddress
from trolly.chain.proto import bank_pb2, distribution_pb2, gov_pb2, market_pb2, slashing_pb2, staking_pb2
from trolly.chain.tx import build_tx, decode_tx, tx_hash, type_url_of

from .amounts import U64_MAX
from .errors import InvalidAddressText, InvalidAmountText, WalletError


@dataclass(frozen=True)
class MessageKind:
    """How the wallet shows a message kind and how much of the signer's balance it moves out."""

    message_type: type
    describe: Callable[[Any], dict]
    spend: Callable[[Any], int]


MESSAGE_KINDS: dict[str, MessageKind] = {}


def register_message_kind(message_type: type, describe: Callable[[Any], dict], spend: Callable[[Any], int]) -> None:
    MESSAGE_KINDS["/" + message_type.DESCRIPTOR.full_name] = MessageKind(message_type, describe, spend)


def address_text(raw: bytes) -> str:
    """The bech32 form of an address field, or a visible marker when it is not a 20-byte address."""
    try:
        return encode_address(raw)
    except InvalidAddress:
        return f"<invalid address: {len(raw)} bytes {raw.hex()}>"


register_message_kind(bank_pb2.MsgSend, lambda m: {"to": address_text(m.to), "amount": m.amount}, lambda m: m.amount)
register_message_kind(
    staking_pb2.MsgCreateValidator,
    lambda m: {
        "consensus_pubkey": base64.b64encode(m.consensus_pubkey).decode(),
        "stake": m.stake,
        "moniker": m.moniker,
        **{name: getattr(m, name) for name in ("commission_rate", "max_rate", "max_change_rate") if m.HasField(name)},
    },
    lambda m: m.stake,
)
register_message_kind(staking_pb2.MsgBond, lambda m: {"amount": m.amount}, lambda m: m.amount)
register_message_kind(staking_pb2.MsgUnbond, lambda m: {"amount": m.amount}, lambda m: 0)
register_message_kind(slashing_pb2.MsgUnjail, lambda m: {}, lambda m: 0)
register_message_kind(staking_pb2.MsgDelegate, lambda m: {"validator": address_text(m.validator), "amount": m.amount},
                      lambda m: m.amount)
register_message_kind(staking_pb2.MsgUndelegate,
                      lambda m: {"validator": address_text(m.validator), "amount": m.amount}, lambda m: 0)
register_message_kind(staking_pb2.MsgRedelegate,
                      lambda m: {"src_validator": address_text(m.src_validator),
                                 "dst_validator": address_text(m.dst_validator), "amount": m.amount}, lambda m: 0)
register_message_kind(distribution_pb2.MsgWithdrawRewards, lambda m: {"validator": address_text(m.validator)},
                      lambda m: 0)


def generic_fields(message: Message) -> dict:
    """Every set field of a message, with protobuf's JSON mapping (bytes as base64, 64-bit integers as text)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


# Market and gov messages that take tokens from the signer's balance, so the funds check before signing covers
# them.
register_message_kind(market_pb2.MsgSubmitTask, lambda m: {**generic_fields(m), "spec": f"<{len(m.spec)} bytes>"},
                      lambda m: m.budget)
register_message_kind(market_pb2.MsgRegisterWorker, generic_fields, lambda m: m.stake)
register_message_kind(market_pb2.MsgUpdateWorker, generic_fields, lambda m: m.add_stake)
register_message_kind(gov_pb2.MsgSubmitProposal, generic_fields, lambda m: m.initial_deposit)
register_message_kind(gov_pb2.MsgDeposit, generic_fields, lambda m: m.amount)


# ---- addresses and messages -------------------------------------------------------------------------------


def parse_address(text: str) -> bytes:
    """The 20 bytes of a `trolly1...` address; InvalidAddressText (with the reason) otherwise."""
    try:
        return decode_address(text.strip())
    except (InvalidAddress, AttributeError) as exc:
        raise InvalidAddressText(str(exc)) from None


def _check_amount(amount: int, what: str) -> int:
    if not isinstance(amount, int) or isinstance(amount, bool) or not 0 < amount <= U64_MAX:
        raise InvalidAmountText(f"{what} must be an integer number of utrl in 1..{U64_MAX}, got {amount!r}")
    return amount


def send_message(to: bytes, amount: int) -> bank_pb2.MsgSend:
    return bank_pb2.MsgSend(to=to, amount=_check_amount(amount, "amount"))


def create_validator_message(consensus_pubkey: bytes, stake: int, moniker: str, commission_rate: int | None = None,
                             max_rate: int | None = None,
                             max_change_rate: int | None = None) -> staking_pb2.MsgCreateValidator:
    """Commission terms in basis points; each left out takes the chain's default."""
    if len(consensus_pubkey) != PUBKEY_LENGTH:
        raise WalletError(f"the consensus public key must be {PUBKEY_LENGTH} bytes (ed25519), got {len(consensus_pubkey)}")
    if not 1 <= len(moniker.encode()) <= 64:
        raise WalletError("the moniker must be 1 to 64 bytes of UTF-8")
    for name, value in (("commission rate", commission_rate), ("max rate", max_rate),
                        ("max change rate", max_change_rate)):
        if value is not None and not 0 <= value <= 10_000:
            raise WalletError(f"the {name} is in basis points, 0..10000, got {value}")
    return staking_pb2.MsgCreateValidator(
        consensus_pubkey=consensus_pubkey, stake=_check_amount(stake, "stake"), moniker=moniker,
        commission_rate=commission_rate, max_rate=max_rate, max_change_rate=max_change_rate,
    )


def delegate_message(validator: bytes, amount: int) -> staking_pb2.MsgDelegate:
    return staking_pb2.MsgDelegate(validator=validator, amount=_check_amount(amount, "amount"))


def undelegate_message(validator: bytes, amount: int) -> staking_pb2.MsgUndelegate:
    return staking_pb2.MsgUndelegate(validator=validator, amount=_check_amount(amount, "amount"))


def redelegate_message(src: bytes, dst: bytes, amount: int) -> staking_pb2.MsgRedelegate:
    if src == dst:
        raise WalletError("the source and destination validators are the same")
    return staking_pb2.MsgRedelegate(src_validator=src, dst_validator=dst, amount=_check_amount(amount, "amount"))


def withdraw_rewards_message(validator: bytes) -> distribution_pb2.MsgWithdrawRewards:
    return distribution_pb2.MsgWithdrawRewards(validator=validator)


def edit_validator_message(commission_rate: int | None, moniker: str | None,
                           details: str | None) -> staking_pb2.MsgEditValidator:
    """Only the fields given change; a rate is in basis points (0..10000)."""
    if commission_rate is None and moniker is None and details is None:
        raise WalletError("give at least one of --commission-rate, --moniker, --details")
    if commission_rate is not None and not 0 <= commission_rate <= 10_000:
        raise WalletError(f"the commission rate is in basis points, 0..10000, got {commission_rate}")
    if moniker is not None and not 1 <= len(moniker.encode()) <= 64:
        raise WalletError("the moniker must be 1 to 64 bytes of UTF-8")
    return staking_pb2.MsgEditValidator(commission_rate=commission_rate, moniker=moniker or "", details=details)


def bond_message(amount: int) -> staking_pb2.MsgBond:
    return staking_pb2.MsgBond(amount=_check_amount(amount, "amount"))


def unbond_message(amount: int) -> staking_pb2.MsgUnbond:
    return staking_pb2.MsgUnbond(amount=_check_amount(amount, "amount"))


def unjail_message() -> slashing_pb2.MsgUnjail:
    """Takes the signer's own validator out of jail: the message names nothing, the signer is the operator."""
    return slashing_pb2.MsgUnjail()


# ---- plans, signing, description ----------------------------------------------------------------------------


_SIZING_KEY = PrivateKey(bytes(32))
"""Signs throw-away copies of a plan only to measure their length (`TxPlan.encoded_size`)."""


@dataclass(frozen=True)
class TxPlan:
    """The body of a transaction before it is signed."""

    chain_id: str
    nonce: int
    fee: int
    messages: tuple[Message, ...]
    memo: str = ""

    def sign(self, key: PrivateKey) -> bytes:
        return build_tx(key, self.chain_id, self.nonce, self.fee, list(self.messages), self.memo)

    def encoded_size(self) -> int:
        """The signed transaction's size in bytes, known before signing: a public key and a signature have fixed
        lengths, so signing with any key gives bytes of the same length."""
        return len(build_tx(_SIZING_KEY, self.chain_id, self.nonce, self.fee, list(self.messages), self.memo))

    def with_fee(self, fee: int) -> "TxPlan":
        return TxPlan(self.chain_id, self.nonce, fee, self.messages, self.memo)

    def with_minimum_fee(self, min_fee: int, fee_per_byte: int) -> "TxPlan":
        """This plan carrying the chain's smallest fee for it, `min_fee + fee_per_byte x its size`. The fee is
        part of the body, so its own length counts: raise it until it covers the size it gives (the size only
        grows with the fee, so this ends after a few steps)."""
        plan = self.with_fee(min_fee)
        while True:
            needed = min_fee + fee_per_byte * plan.encoded_size()
            if needed <= plan.fee:
                return plan
            plan = plan.with_fee(needed)

    @property
    def spend(self) -> int:
        """utrl leaving the signer's balance if every message succeeds: the fee plus what messages move out."""
        return self.fee + sum(message_spend(message) for message in self.messages)

    def describe(self, signer: str) -> dict:
        return {
            "signer": signer,
            "chain_id": self.chain_id,
            "nonce": self.nonce,
            "fee": self.fee,
            "memo": self.memo,
            "messages": [describe_message(type_url_of(m), m) for m in self.messages],
            "total_spend": self.spend,
        }


def message_spend(message: Message) -> int:
    kind = MESSAGE_KINDS.get(type_url_of(message))
    return kind.spend(message) if kind else 0


def message_class(type_url: str) -> type | None:
    """The protobuf class of a type URL: registered kinds first, then any message the process has loaded."""
    kind = MESSAGE_KINDS.get(type_url)
    if kind is not None:
        return kind.message_type
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(type_url.lstrip("/"))
    except KeyError:
        return None
    return message_factory.GetMessageClass(descriptor)


def describe_message(type_url: str, message: Message | bytes) -> dict:
    """`{"type": url, "fields": {...}}` for showing a message; never raises on bytes it cannot decode."""
    size = len(message) if isinstance(message, bytes) else message.ByteSize()
    cls = message_class(type_url)
    if cls is None:
        return {"type": type_url, "fields": {"unknown_bytes": size}}
    if isinstance(message, bytes):
        try:
            message = cls.FromString(message)
        except (DecodeError, RuntimeError, ValueError):
            return {"type": type_url, "fields": {"undecodable_bytes": size}}
    kind = MESSAGE_KINDS.get(type_url)
    if kind is None:
        return {"type": type_url, "fields": generic_fields(message)}
    try:
        return {"type": type_url, "fields": kind.describe(message)}
    except (ChainError, ValueError):  # a describer meeting a malformed field: show the raw fields instead
        return {"type": type_url, "fields": generic_fields(message)}


def describe_tx(raw: bytes) -> dict:
    """Plain JSON view of signed transaction bytes (raises WalletError if they are not a transaction)."""
    try:
        tx = decode_tx(raw)
    except ChainError as exc:
        raise WalletError(f"not a Trolly transaction: {exc}") from None
    messages = [describe_message(m.type_url, m.value) for m in tx.body.messages]
    spend = tx.body.fee
    for any_message in tx.body.messages:
        kind = MESSAGE_KINDS.get(any_message.type_url)
        if kind:
            try:
                spend += kind.spend(kind.message_type.FromString(any_message.value))
            except (DecodeError, RuntimeError, ValueError):
                pass  # shown as undecodable above; the chain will refuse it
    return {
        "hash": tx_hash(raw).hex().upper(),
        "signer": encode_address(address_from_pubkey(tx.pubkey)),
        "chain_id": tx.body.chain_id,
        "nonce": tx.body.nonce,
        "fee": tx.body.fee,
        "memo": tx.body.memo,
        "messages": messages,
        "total_spend": spend,
    }
