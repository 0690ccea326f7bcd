"""`trolly-wallet tx stake ...`: become a validator, delegate to validators, take stake out, collect rewards.

`create-validator` registers the signer as a validator with a consensus key (the ed25519 key CometBFT signs
blocks with), a first self-bond and commission terms; `bond`/`unbond` add to and take from that self-bond;
`edit-validator` changes its commission rate, moniker or details. Any account `delegate`s to a validator,
`undelegate`s (the tokens come back after the unbonding period), `redelegate`s to another validator at once, and
`withdraw-rewards` collects what its delegation earned of the fees. `unjail` brings a validator jailed for
downtime back into the set once its jail time has passed (`query signing-info` says until when). Amounts like
`5trl` or `5000000utrl`; commission in basis points (1000 = 10%).
"""

from __future__ import annotations

import base64
import binascii
import json
import pathlib

import click

from ..amounts import parse_amount
from ..errors import WalletError
from ..txbuilder import bond_message, create_validator_message, delegate_message, edit_validator_message
from ..txbuilder import parse_address, redelegate_message, unbond_message, undelegate_message
from ..txbuilder import unjail_message, withdraw_rewards_message
from ..command_line.errors import WalletGroup
from .transactions import TransactionFlags, run_transaction, transaction_options


@click.group(cls=WalletGroup)
def stake() -> None:
    """Create a validator, bond to it, delegate, undelegate, redelegate, collect rewards, unjail."""


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
@click.option("--commission-rate", type=int, default=None, help="Commission in basis points (default 1000 = 10%).")
@click.option("--max-rate", type=int, default=None, help="Highest commission ever allowed, fixed (default 2000).")
@click.option("--max-change-rate", type=int, default=None,
              help="Largest change of the rate per commission period, basis points (default 100).")
@transaction_options
def create_validator(stake_amount: str, moniker: str, consensus_pubkey: str | None, consensus_key_file: str | None,
                     commission_rate: int | None, max_rate: int | None, max_change_rate: int | None,
                     **flags) -> None:
    """Register the --from account as a validator operator with a first stake."""
    message = create_validator_message(
        parse_consensus_pubkey(consensus_pubkey, consensus_key_file), parse_amount(stake_amount, what="stake"), moniker,
        commission_rate, max_rate, max_change_rate,
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


@stake.command("delegate")
@click.argument("validator")
@click.argument("amount")
@transaction_options
def delegate(validator: str, amount: str, **flags) -> None:
    """Delegate AMOUNT of the --from account's balance to VALIDATOR (its operator address)."""
    run_transaction(TransactionFlags(**flags), [delegate_message(parse_address(validator), parse_amount(amount))])


@stake.command("undelegate")
@click.argument("validator")
@click.argument("amount")
@transaction_options
def undelegate(validator: str, amount: str, **flags) -> None:
    """Take AMOUNT of the --from account's delegation out of VALIDATOR (returned after the unbonding period)."""
    run_transaction(TransactionFlags(**flags), [undelegate_message(parse_address(validator), parse_amount(amount))])


@stake.command("redelegate")
@click.argument("src_validator")
@click.argument("dst_validator")
@click.argument("amount")
@transaction_options
def redelegate(src_validator: str, dst_validator: str, amount: str, **flags) -> None:
    """Move AMOUNT of the --from account's delegation from SRC_VALIDATOR to DST_VALIDATOR at once."""
    message = redelegate_message(parse_address(src_validator), parse_address(dst_validator), parse_amount(amount))
    run_transaction(TransactionFlags(**flags), [message])


@stake.command("withdraw-rewards")
@click.argument("validator")
@transaction_options
def withdraw_rewards(validator: str, **flags) -> None:
    """Collect the fee rewards the --from account's delegation to VALIDATOR earned."""
    run_transaction(TransactionFlags(**flags), [withdraw_rewards_message(parse_address(validator))])


@stake.command("edit-validator")
@click.option("--commission-rate", type=int, default=None, help="New commission in basis points.")
@click.option("--moniker", default=None, help="New public name (1-64 bytes).")
@click.option("--details", default=None, help="New free text about the validator (up to 280 bytes).")
@transaction_options
def edit_validator(commission_rate: int | None, moniker: str | None, details: str | None, **flags) -> None:
    """Change the --from account's validator: its commission rate (within its bounds), moniker or details."""
    run_transaction(TransactionFlags(**flags), [edit_validator_message(commission_rate, moniker, details)])
