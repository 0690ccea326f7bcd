"""Signing for the pages: a key of the local keyring unlocked with the password the page sent, used for one
transaction, and forgotten. No key material leaves this process; the page sees names and addresses only.

`preview` is the CLI's confirmation step (`trolly-wallet tx ...` shows the plan and asks before signing): the
plan's description, nothing reserved. `sign_and_send` plans again, unlocks, signs and waits for the block; a
wrong password raises `WrongPassword` before anything is signed, and the nonce it planned is given back.
"""

from __future__ import annotations

from google.protobuf.message import Message

from trolly.chain.crypto import PrivateKey
from trolly.wallet.errors import KeyNotFound, WalletError
from trolly.wallet.keyring import KeyInfo
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.sender import SendOutcome, TxSender

from .config import ConsoleConfig

INCLUSION_TIMEOUT = 30.0


def find_key(config: ConsoleConfig, name: str) -> KeyInfo:
    """The keyring's key named `name` (public information only)."""
    keyring = config.keyring()
    if not name or not keyring.exists(name):
        raise KeyNotFound(name or "(none chosen)", config.keyring_backend)
    return keyring.get(name)


async def preview(client: AsyncRpcClient, config: ConsoleConfig, key_name: str, messages: list[Message]) -> dict:
    """The transaction as the CLI shows it before asking (signer, nonce, fee, messages, total spend)."""
    info = find_key(config, key_name)
    plan = await TxSender(client).plan(info.address, messages, reserve=False)
    return plan.describe(info.address)


def unlock(config: ConsoleConfig, key_name: str, password: str) -> PrivateKey:
    """The private key `key_name`, unlocked with `password` by a keyring made for this once."""
    info = find_key(config, key_name)
    return config.keyring(password).signer(info.name)


async def sign_and_send(client: AsyncRpcClient, config: ConsoleConfig, key_name: str, password: str,
                        messages: list[Message]) -> tuple[SendOutcome, PrivateKey]:
    """Plan, unlock, sign, broadcast and wait for the block; the outcome and the key (for a caller that must
    sign again for the same action, as a private task's key deliveries do)."""
    info = find_key(config, key_name)
    sender = TxSender(client, config.nonce_cache())
    plan = await sender.plan(info.address, messages)
    try:
        key = unlock(config, key_name, password)
    except WalletError:
        sender.release(info.address, plan)  # a wrong password: nothing was signed
        raise
    return await sender.send(key, plan, timeout=INCLUSION_TIMEOUT), key
