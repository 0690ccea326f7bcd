"""`trolly-wallet tx stake ...`: become a validator, add stake, take stake out, leave jail.

Staking is self-bond only: the signer's own validator. `create-validator` registers it with a consensus key
(the ed25519 key CometBFT signs blocks with) and a first stake; `bond` adds to it; `unbond` takes stake out
(power drops at once, the tokens come back after the unbonding period); `unjail` brings a validator jailed for
downtime back into the set once its jail time has passed (`query signing-info` says until when).
"""

from __future__ import annotations

import base64
import binascii
import json
import pathlib

import click

from ..amounts import parse_amount
from ..errors import WalletError
from ..txbuilder import bond_message, create_validator_message, unbond_message, unjail_message
from ..command_line.errors import WalletGroup
from .transactions import TransactionFlags, run_transaction, transaction_options


@click.group(cls=WalletGroup)
def stake() -> None:
    """Create a validator, bond stake to it, unbond stake from it, unjail it."""


def parse_consensus_pubkey(text: str | None, key_file: str | None) -> bytes:
    """A 32-byte ed25519 public key from base64/hex text or from a CometBFT priv_validator_key.json."""
    if key_file:
        try:
            document = json.loads(pathlib.Path(key_file).read_text())
            text = document["pub_key"]["value"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise WalletError(f"cannot read a pub_key from {key_file}: {exc}") from None
    if not text:
        raise WalletError("give the validator's consensus key: --consensus-pubkey or --consensus-key-file")
    text = text.strip()
    candidates = []
    if len(text) == 64:
        try:
            candidates.append(bytes.fromhex(text))
        except ValueError:
            pass
    try:
        candidates.append(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        pass
    for candidate in candidates:
        if len(candidate) == 32:
            return candidate
    raise WalletError("the consensus public key must be 32 bytes (ed25519), as base64 or 64 hex digits")


@stake.command("create-validator")
@click.option("--stake", "stake_amount", required=True, help="First self-bond, e.g. 10trl.")
@click.option("--moniker", required=True, help="Public name of the validator (1-64 bytes).")
@click.option("--consensus-pubkey", default=None, help="The validator's consensus (CometBFT) ed25519 public key, base64 or hex.")
@click.option("--consensus-key-file", type=click.Path(dir_okay=False), default=None,
              help="Read the consensus public key from a CometBFT priv_validator_key.json.")
@transaction_options
def create_validator(stake_amount: str, moniker: str, consensus_pubkey: str | None, consensus_key_file: str | None,
                     **flags) -> None:
    """Register the --from account as a validator operator with a first stake."""
    message = create_validator_message(
        parse_consensus_pubkey(consensus_pubkey, consensus_key_file), parse_amount(stake_amount, what="stake"), moniker
    )
    run_transaction(TransactionFlags(**flags), [message])


@stake.command("bond")
@click.argument("amount")
@transaction_options
def bond(amount: str, **flags) -> None:
    """Add AMOUNT of the --from account's balance to its own validator's stake."""
    run_transaction(TransactionFlags(**flags), [bond_message(parse_amount(amount))])


@stake.command("unbond")
@click.argument("amount")
@transaction_options
def unbond(amount: str, **flags) -> None:
    """Take AMOUNT out of the --from account's validator stake (returned after the unbonding period)."""
    run_transaction(TransactionFlags(**flags), [unbond_message(parse_amount(amount))])


@stake.command("unjail")
@transaction_options
def unjail(**flags) -> None:
    """Take the --from account's validator out of jail (after a downtime jail has run its course): it signs and
    earns again. Refused while jail time remains, for a validator tombstoned for double-signing, below the
    minimum self-stake (bond first), or when it is not jailed."""
    run_transaction(TransactionFlags(**flags), [unjail_message()])
