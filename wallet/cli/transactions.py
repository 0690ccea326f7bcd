"""The shared path of every `tx` command: plan, confirm, sign, then send, dry-run or print.

Each `tx` subcommand only builds its messages and calls `run_transaction`; the flags that every transaction
takes (`--from`, `--fees`, `--chain-id`, `--yes`, `--dry-run`, `--generate-only`, ...) are added by
`transaction_options`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import click
from google.protobuf.message import Message

from trolly.chain.crypto import PrivateKey
from trolly.chain.tx import tx_hash

from ..amounts import parse_amount
from ..errors import KeyNotFound, WalletError
from ..keyring import BACKENDS, Keyring, KeyInfo
from ..sender import SendOutcome, TxSender
from ..txbuilder import TxPlan, parse_address
from ..command_line.options import keyring_options, node_options, output_option, settings
from ..command_line.output import amount_text, console, emit, key_value_table, print_key_values

DEFAULT_INCLUSION_TIMEOUT = 30.0


@dataclass(frozen=True)
class TransactionFlags:
    signer: str
    fees: str | None
    chain_id: str | None
    memo: str
    nonce: int | None
    yes: bool
    dry_run: bool
    generate_only: bool
    no_wait: bool
    timeout: float


_TRANSACTION_OPTIONS = [
    click.option("--from", "signer", required=True, help="Name (or address) of the key that signs and pays."),
    click.option("--fees", default=None, help="Fee, e.g. 0.01trl or 10000utrl (default: the chain's minimum fee)."),
    click.option("--chain-id", default=None, help="Chain id to sign for (default: asked from the node)."),
    click.option("--memo", default="", help="A note stored with the transaction."),
    click.option("--nonce", type=click.IntRange(min=0), default=None,
                 help="Use this nonce instead of the node's (with --generate-only and --chain-id: fully offline)."),
    click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation before signing."),
    click.option("--dry-run", is_flag=True, help="Build and check the transaction (funds included) but sign and send nothing."),
    click.option("--generate-only", is_flag=True, help="Sign and print the transaction (base64) without sending it."),
    click.option("--no-wait", is_flag=True, help="Return once the node accepted the transaction, without waiting for a block."),
    click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_INCLUSION_TIMEOUT, show_default=True,
                 help="Seconds to wait for the transaction to be included in a block."),
]


def transaction_options(function):
    """The flags every transaction command takes; the command passes them on as `TransactionFlags(**flags)`."""
    function = keyring_options(node_options(output_option(function)))  # listed after the transaction's own
    for option in reversed(_TRANSACTION_OPTIONS):
        function = option(function)
    return function


def looks_like_address(text: str) -> bool:
    """Bech32-shaped text (`hrp1` + data): treated as an address, so a typo gets "invalid address", not "unknown key"."""
    hrp, separator, data = text.lower().rpartition("1")
    return bool(separator and hrp and len(data) >= 6 and len(text) >= 30 and hrp.isalpha())


def resolve_key(keyring: Keyring, name_or_address: str) -> KeyInfo:
    """The key that will sign: it must be in the keyring of the chosen backend."""
    if looks_like_address(name_or_address):
        parse_address(name_or_address)  # a bad checksum is reported as such
        found = keyring.find_by_address(name_or_address)
    else:
        found = keyring.get(name_or_address) if keyring.exists(name_or_address) else None
    if found is not None:
        return found
    elsewhere = [backend for backend in BACKENDS if backend != keyring.backend
                 and _find_public(settings().keyring(backend), name_or_address) is not None]
    hint = f"it is in the {elsewhere[0]} keyring: add --keyring-backend {elsewhere[0]}" if elsewhere else ""
    raise KeyNotFound(name_or_address, keyring.backend, hint)


def _find_public(keyring: Keyring, name_or_address: str) -> KeyInfo | None:
    if looks_like_address(name_or_address):
        return keyring.find_by_address(name_or_address)
    return keyring.get(name_or_address) if keyring.exists(name_or_address) else None


def lookup_address(name_or_address: str) -> str:
    """An address given directly, or the address of a named key in any backend (the chosen one first).

    Used for recipients and queries, where only public information is needed, so `tx send alice ...` works
    whether alice's key is in the file keyring and the sender's in the test keyring or the other way round.
    """
    if looks_like_address(name_or_address):
        parse_address(name_or_address)  # a bad checksum is reported as such, before any network traffic
        return name_or_address
    options = settings()
    backends = [options.keyring_backend] + [b for b in BACKENDS if b != options.keyring_backend]
    for backend in backends:
        found = _find_public(options.keyring(backend), name_or_address)
        if found is not None:
            return found.address
    raise KeyNotFound(name_or_address, "", "not a key in any keyring here, and not a trolly1... address")


def render_plan(description: dict, err: bool) -> None:
    rows = [("signer", description["signer"]), ("chain id", description["chain_id"]), ("nonce", description["nonce"]),
            ("fee", amount_text(description["fee"]))]
    if description["memo"]:
        rows.append(("memo", description["memo"]))
    for number, message in enumerate(description["messages"], 1):
        fields = ", ".join(
            f"{name}={amount_text(value) if name in ('amount', 'stake') else value}"
            for name, value in message["fields"].items()
        )
        rows.append((f"message {number}", f"{message['type']} {fields}"))
    rows.append(("total spend", amount_text(description["total_spend"])))
    console(err).print(key_value_table(rows, title="Transaction"))


@dataclass(frozen=True)
class Transacted:
    """What `transact` did: the key that signed (None when nothing was signed) and the outcome of sending (None
    when nothing was sent: a dry run, or a transaction only printed)."""

    key: PrivateKey | None
    outcome: SendOutcome | None


def run_transaction(flags: TransactionFlags, messages: list[Message]) -> PrivateKey | None:
    """Plan, show, confirm, sign and send (or print) `messages`; the key that signed, None when nothing was."""
    return settings().client().run(transact(flags, messages)).key


async def transact(flags: TransactionFlags, messages: list[Message]) -> Transacted:
    """`run_transaction` on the command's event loop, for library code that sends through it (`task submit`'s
    `requester.submit_task`); the outcome too."""
    options = settings()
    keyring = options.keyring()
    signer = resolve_key(keyring, flags.signer)
    fee = None if flags.fees is None else parse_amount(flags.fees, allow_zero=True, what="fee")
    offline = flags.generate_only and flags.chain_id and flags.nonce is not None
    if offline:
        plan = TxPlan(flags.chain_id, flags.nonce, fee or 0, tuple(messages), flags.memo)
        sender = None
    else:
        sender = TxSender(options.client().async_client, options.nonce_cache())
        plan = await sender.plan(signer.address, messages, fee, chain_id=flags.chain_id, memo=flags.memo,
                                 nonce=flags.nonce, reserve=not flags.dry_run)
    description = plan.describe(signer.address)

    if flags.dry_run:
        emit({"dry_run": True, "tx": description}, options.json, lambda data: render_plan(description, err=False))
        if not options.json:
            click.echo("Dry run: the signer can pay for this; nothing was signed or sent.")
        return Transacted(None, None)
    if not flags.yes:
        render_plan(description, err=True)
        action = "Sign and print" if flags.generate_only else "Sign and broadcast"
        if not click.confirm(f"{action} this transaction?", err=True):
            if sender is not None:
                sender.release(signer.address, plan)
            raise WalletError("cancelled: nothing was signed")
    try:
        key = keyring.signer(signer.name)
    except WalletError:
        if sender is not None:
            sender.release(signer.address, plan)  # e.g. a wrong password: nothing was signed
        raise
    if flags.generate_only:
        raw = plan.sign(key)
        result = {"tx": base64.b64encode(raw).decode(), "hash": tx_hash(raw).hex().upper(), "body": description}
        if options.json:
            emit(result, True, lambda data: None)
        else:
            click.echo(result["tx"])
        return Transacted(key, None)
    outcome = await sender.send(key, plan, wait=not flags.no_wait, timeout=flags.timeout)
    report_outcome(outcome, description)
    return Transacted(key, outcome)


def report_outcome(outcome: SendOutcome, description: dict) -> None:
    options = settings()
    result = {**outcome.to_json(), "tx": description}

    def render(data: dict) -> None:
        rows = [("hash", outcome.hash), ("nonce", outcome.nonce)]
        if outcome.included is None:
            rows.append(("status", "accepted into the mempool (not waiting for a block)"))
        else:
            rows += [("height", outcome.included.height), ("code", outcome.included.code),
                     ("log", outcome.included.log or "-")]
        print_key_values(rows, title="Transaction included" if outcome.included else "Transaction sent")

    emit(result, options.json, render)
