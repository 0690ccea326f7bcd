"""`trolly-wallet keys ...`: create, recover, list, show, export, import and delete keys."""

from __future__ import annotations

import pathlib

import click

from trolly.chain.hd import COIN_TYPE, DEFAULT_PATH

from ..armor import decrypt_armor, encrypt_armor
from ..errors import KeyringError, WalletError
from ..files import DIRECTORY_MODE, make_directories, write_atomically
from ..keyring import TEST_BACKEND_WARNING, KeyInfo
from ..passwords import read_password_file
from ..command_line.errors import WalletGroup
from ..command_line.options import keyring_options, output_option, read_secret_line, settings
from ..command_line.output import emit, print_key_values, print_table

MNEMONIC_WARNING = (
    "**Important**: write this mnemonic phrase down and keep it safe. It is the only way to recover this key, "
    "it is shown only now, and anyone who has it controls the account."
)


@click.group(cls=WalletGroup)
def keys() -> None:
    """Manage the keys in the wallet home's keyring."""


def _key_json(info: KeyInfo) -> dict:
    return info.to_json()


def _print_key(info: KeyInfo) -> None:
    print_key_values(
        [("name", info.name), ("address", info.address), ("pubkey", info.to_json()["pubkey"]),
         ("path", info.path or "-"), ("backend", info.backend)]
    )


def _warn_if_test_backend(backend: str) -> None:
    if backend == "test":
        click.echo(f"Warning: the test keyring stores keys UNENCRYPTED ({TEST_BACKEND_WARNING}).", err=True)


@keys.command("add")
@click.argument("name")
@click.option("--recover", is_flag=True, help="Recover the key from an existing BIP39 mnemonic (asked for, or read from stdin).")
@click.option("--index", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help=f"Address index: the key is derived along m/44'/{COIN_TYPE}'/0'/0'/<index>'.")
@click.option("--hd-path", default=None, help=f"Full hardened derivation path (overrides --index; default {DEFAULT_PATH}).")
@keyring_options
@output_option
def add_key(name: str, recover: bool, index: int, hd_path: str | None) -> None:
    """Create key NAME from a new 24-word mnemonic (shown once), or --recover it from yours.

    The ed25519 key is derived from the mnemonic by SLIP-0010 along m/44'/7777'/0'/0'/0' (change the last
    index with --index). With the file backend you choose the keyring password the first time.
    """
    options = settings()
    keyring = options.keyring()
    path = hd_path or f"m/44'/{COIN_TYPE}'/0'/0'/{index}'"
    if keyring.exists(name):
        raise KeyringError(f"a key named {name!r} already exists in the {keyring.backend} keyring")
    _warn_if_test_backend(keyring.backend)
    if recover:
        mnemonic = read_secret_line("Enter your BIP39 mnemonic")
        info = keyring.recover(name, mnemonic, path)
        shown = None
    else:
        info, shown = keyring.create(name, path)
    result = _key_json(info)
    if shown:
        result["mnemonic"] = shown

    def render(data: dict) -> None:
        _print_key(info)
        if shown:
            click.echo("")
            click.echo(MNEMONIC_WARNING)
            click.echo("")
            click.echo(shown)

    emit(result, options.json, render)


@keys.command("list")
@keyring_options
@output_option
def list_keys() -> None:
    """List the keys (name, address); never asks for the password."""
    options = settings()
    found = options.keyring().list()
    if found and not options.json:
        _warn_if_test_backend(options.keyring_backend)
    emit(
        [_key_json(info) for info in found],
        options.json,
        lambda data: print_table(
            ["name", "address", "backend"],
            [[info.name, info.address, info.backend] for info in found],
            empty=f"No keys in the {options.keyring_backend} keyring of {options.home}.",
        ),
    )


@keys.command("show")
@click.argument("name")
@click.option("--address", "address_only", is_flag=True, help="Print only the address (for scripts).")
@keyring_options
@output_option
def show_key(name: str, address_only: bool) -> None:
    """Show key NAME's address and public key (no password needed)."""
    options = settings()
    info = options.keyring().get(name)
    if address_only and not options.json:
        click.echo(info.address)
        return
    emit(_key_json(info), options.json, lambda data: _print_key(info))


def _armor_password(password_file: str | None, confirm: bool) -> str:
    if password_file:
        return read_password_file(password_file)
    return click.prompt("Armor password", hide_input=True, confirmation_prompt=confirm, err=True)


@keys.command("export")
@click.argument("name")
@click.option("--armor-password-file", type=click.Path(dir_okay=False),
              help="Read the password that encrypts the armor from this file (else a prompt).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write the armor to this file (mode 0600) instead of stdout.")
@keyring_options
@output_option
def export_key(name: str, armor_password_file: str | None, out_file: str | None) -> None:
    """Export key NAME as password-encrypted armor (its own password, not the keyring's)."""
    options = settings()
    key = options.keyring().signer(name)
    armor = encrypt_armor(key, _armor_password(armor_password_file, confirm=True))
    if out_file:
        path = pathlib.Path(out_file)
        # The folders it has to create are private; one that exists is the user's (a home, /tmp) and keeps its mode.
        make_directories(path.parent, DIRECTORY_MODE)
        write_atomically(path, armor.encode())
    result = {"name": name, "address": options.keyring().get(name).address, "armor": armor, "file": out_file}
    if options.json:
        emit(result, True, lambda data: None)
    elif out_file:
        click.echo(f"Exported {name} to {out_file}")
    else:
        click.echo(armor, nl=False)


@keys.command("import")
@click.argument("name")
@click.argument("armor_file", type=click.File("r"))
@click.option("--armor-password-file", type=click.Path(dir_okay=False),
              help="Read the armor's password from this file (else a prompt).")
@keyring_options
@output_option
def import_key(name: str, armor_file, armor_password_file: str | None) -> None:
    """Import key NAME from an armor file (or - for stdin) made by `keys export`."""
    options = settings()
    keyring = options.keyring()
    if keyring.exists(name):
        raise KeyringError(f"a key named {name!r} already exists in the {keyring.backend} keyring")
    armor = armor_file.read()
    key = decrypt_armor(armor, _armor_password(armor_password_file, confirm=False))
    _warn_if_test_backend(keyring.backend)
    info = keyring.add_seed(name, key.seed, "")
    emit(_key_json(info), options.json, lambda data: _print_key(info))


@keys.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@keyring_options
@output_option
def delete_key(name: str, yes: bool) -> None:
    """Delete key NAME from the keyring (asks first). Without its mnemonic or an export it is gone for good."""
    options = settings()
    keyring = options.keyring()
    info = keyring.get(name)
    if not yes and not click.confirm(f"Delete key {name!r} ({info.address})? This cannot be undone", err=True):
        raise WalletError("cancelled: nothing was deleted")
    keyring.delete(name)
    emit({"deleted": name, "address": info.address}, options.json, lambda data: click.echo(f"Deleted key {name}"))
