"""`trolly-wallet tx ...`: send tokens, stake, and broadcast transactions signed elsewhere."""

from __future__ import annotations

import base64
import binascii
import json

import click

from ..amounts import parse_amount
from ..errors import WalletError
from ..sender import TxSender
from ..txbuilder import describe_tx, parse_address, send_message
from ..command_line.errors import WalletGroup
from ..command_line.options import keyring_options, node_options, output_option, settings
from .gov import gov
from .stake import stake
from .transactions import TransactionFlags, lookup_address, render_plan, report_outcome, run_transaction
from .transactions import transaction_options, DEFAULT_INCLUSION_TIMEOUT


@click.group(cls=WalletGroup)
def tx() -> None:
    """Sign and send transactions."""


tx.add_command(stake)
tx.add_command(gov)


def recipient_address(text: str) -> bytes:
    """TO may be an address or the name of a key in any of this home's keyrings."""
    return parse_address(lookup_address(text))


@tx.command("send")
@click.argument("to")
@click.argument("amount")
@transaction_options
def send(to: str, amount: str, **flags) -> None:
    """Send AMOUNT (e.g. 1.5trl or 1500000utrl) to TO (an address or a key name)."""
    message = send_message(recipient_address(to), parse_amount(amount))
    run_transaction(TransactionFlags(**flags), [message])


def read_signed_tx(text: str) -> bytes:
    """The bytes of a transaction from base64 text or from the JSON that `--generate-only --output json` prints."""
    text = text.strip()
    if text.startswith("{"):
        try:
            text = json.loads(text)["tx"]
        except (ValueError, KeyError, TypeError):
            raise WalletError("the JSON file has no \"tx\" field with a base64 transaction") from None
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise WalletError("the file is not a base64 transaction (as printed by --generate-only)") from None


@tx.command("broadcast")
@click.argument("tx_file", type=click.File("r"))
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation before broadcasting.")
@click.option("--no-wait", is_flag=True, help="Return once the node accepted the transaction, without waiting for a block.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_INCLUSION_TIMEOUT, show_default=True,
              help="Seconds to wait for the transaction to be included in a block.")
@keyring_options
@node_options
@output_option
def broadcast(tx_file, yes: bool, no_wait: bool, timeout: float) -> None:
    """Broadcast a signed transaction from TX_FILE (or - for stdin), as printed by --generate-only."""
    options = settings()
    raw = read_signed_tx(tx_file.read())
    description = describe_tx(raw)
    if not yes:
        render_plan(description, err=True)
        if not click.confirm("Broadcast this transaction?", err=True):
            raise WalletError("cancelled: nothing was broadcast")
    client = options.client()
    sender = TxSender(client.async_client, options.nonce_cache())
    outcome = client.run(sender.broadcast_signed(raw, wait=not no_wait, timeout=timeout))
    report_outcome(outcome, description)
