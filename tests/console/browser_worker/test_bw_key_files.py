"""The browser worker's key files (console/web/src/browser_worker/armor.js, keystore.js): an armor written by the
wallet's `keys export` (wallet/armor.py) opens in the tab to the same key, and every armor the wallet would refuse
is refused with the wallet's reason; the key the page keeps in localStorage round-trips, opens with nacl in Python
as its format says, and refuses a wrong password, an edited address and an edited cost."""

from __future__ import annotations

import base64
import hashlib
import json

import nacl.pwhash.argon2id as argon2id
import nacl.secret
import pytest

from bw_chain_helpers import NODE, run_node_script
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.wallet.armor import encrypt_armor
from trolly.wallet.keyring import KdfParams

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

KEY = PrivateKey(hashlib.sha256(b"browser worker armor").digest())
OTHER = PrivateKey(hashlib.sha256(b"someone else").digest())
PASSWORD = "correct horse battery"
INTERACTIVE = KdfParams(argon2id.OPSLIMIT_INTERACTIVE, argon2id.MEMLIMIT_INTERACTIVE)


def edited(armor: str, header: str, value: str) -> str:
    lines = armor.splitlines()
    return "\n".join(f"{header}: {value}" if line.startswith(f"{header}:") else line for line in lines) + "\n"


def armor_cases() -> list[tuple[str, str, str, dict]]:
    """(case, armor text, password, what the tab must answer)."""
    interactive = encrypt_armor(KEY, PASSWORD, INTERACTIVE)
    opened = {"address": encode_address(KEY.address)}
    lines = interactive.splitlines()
    body_at = lines.index("") + 1
    flipped = lines[body_at][:10] + ("A" if lines[body_at][10] != "A" else "B") + lines[body_at][11:]
    return [
        ("as `keys export` writes it (MODERATE)", encrypt_armor(KEY, PASSWORD), PASSWORD, opened),
        ("at INTERACTIVE, the weakest accepted", interactive, PASSWORD, opened),
        ("with Windows line ends and indentation", "  " + interactive.replace("\n", "\r\n"), PASSWORD, opened),
        ("a wrong password", interactive, PASSWORD + "!", {
            "error": "WrongPassword", "message": "wrong password for this armored key (or the armor was altered)"}),
        ("a byte of the box changed", "\n".join(lines[:body_at] + [flipped] + lines[body_at + 1:]), PASSWORD, {
            "error": "WrongPassword", "message": "wrong password for this armored key (or the armor was altered)"}),
        ("an edited address header", edited(interactive, "address", encode_address(OTHER.address)), PASSWORD, {
            "error": "KeyFileError", "message": "armor header address does not match the key inside it"}),
        ("not an armor", "-----BEGIN PGP PRIVATE KEY BLOCK-----\nxyz\n", PASSWORD, {
            "error": "KeyFileError",
            "message": "not an armored Trolly key: expected -----BEGIN TROLLY PRIVATE KEY----- ... "
                       "-----END TROLLY PRIVATE KEY-----"}),
        ("no blank line", interactive.replace("\n\n", "\n"), PASSWORD, {
            "error": "KeyFileError", "message": "malformed armor: no blank line between headers and body"}),
        ("a body that is not base64", interactive.replace(lines[body_at], "!!" + lines[body_at][2:]), PASSWORD, {
            "error": "KeyFileError", "message": "malformed armor body: not base64"}),
        ("another kdf", edited(interactive, "kdf", "scrypt"), PASSWORD, {
            "error": "KeyFileError", "message": "unsupported armor: expected kdf argon2id and type ed25519"}),
        ("a cost weaker than INTERACTIVE", edited(interactive, "opslimit", "1"), PASSWORD, {
            "error": "KeyFileError", "message": "armor header: argon2id opslimit 1 is weaker than the 2 accepted "
                                                "(libsodium's INTERACTIVE level); the file was not written by Trolly"}),
        ("64 GiB of memory asked", edited(interactive, "memlimit", str(64 << 30)), PASSWORD, {
            "error": "KeyFileError", "message": f"armor header: argon2id memlimit {64 << 30} is more than the "
                                                f"{1 << 30} accepted (libsodium's SENSITIVE level); the file is "
                                                "damaged or was not written by Trolly"}),
        ("a signed cost", edited(interactive, "opslimit", "-3"), PASSWORD, {
            "error": "KeyFileError", "message": 'malformed armor header: opslimit must be a decimal number, got "-3"'}),
    ]


def test_armors_from_the_wallet_open_to_the_same_key_and_bad_ones_are_refused_with_the_reason():
    cases = armor_cases()
    stored_cases = stored_entry_cases()
    answer = run_node_script("key_files.mjs", {
        "armors": [{"text": text, "password": password} for _, text, password, _ in cases],
        "storage": {"seed": KEY.seed.hex(), "password": PASSWORD, "wrongPassword": "correct horse battery!"},
        "stored": [{"json": text, "password": PASSWORD} for _, text, _ in stored_cases],
    })
    for (name, _, _, expected), got in zip(cases, answer["armors"], strict=True):
        assert got == expected, name

    storage = answer["storage"]
    address = encode_address(KEY.address)
    assert storage["claimed"] == address and storage["right"] == {"address": address}
    assert storage["wrong"] == {"error": "WrongPassword", "message": "wrong password for the key stored in this browser"}
    assert storage["short"] == {"error": "KeyFileError", "message": "the password must be at least 8 characters"}
    assert open_stored_in_python(storage["sealed"], PASSWORD) == KEY.seed
    assert PASSWORD not in storage["sealed"] and KEY.seed.hex() not in storage["sealed"]

    for (name, _, expected), got in zip(stored_cases, answer["stored"], strict=True):
        assert got == expected, name


def open_stored_in_python(text: str, password: str) -> bytes:
    """What the stored entry says it is: argon2id at its costs over its salt, secretbox of the seed."""
    entry = json.loads(text)
    assert entry["format"] == "trolly-browser-key/1" and entry["kdf"] == "argon2id"
    assert (entry["opslimit"], entry["memlimit"]) == (argon2id.OPSLIMIT_MODERATE, argon2id.MEMLIMIT_MODERATE)
    key = argon2id.kdf(32, password.encode(), base64.b64decode(entry["salt"]), opslimit=entry["opslimit"],
                       memlimit=entry["memlimit"])
    return nacl.secret.SecretBox(key).decrypt(base64.b64decode(entry["box"]))


def python_stored_entry(key: PrivateKey, password: str, **changes) -> str:
    """An entry in the page's storage format made by Python (INTERACTIVE, to keep the test quick), with `changes`."""
    salt = bytes(range(16))
    box_key = argon2id.kdf(32, password.encode(), salt, opslimit=argon2id.OPSLIMIT_INTERACTIVE,
                           memlimit=argon2id.MEMLIMIT_INTERACTIVE)
    entry = {"format": "trolly-browser-key/1", "kdf": "argon2id", "opslimit": argon2id.OPSLIMIT_INTERACTIVE,
             "memlimit": argon2id.MEMLIMIT_INTERACTIVE, "salt": base64.b64encode(salt).decode(),
             "box": base64.b64encode(bytes(nacl.secret.SecretBox(box_key).encrypt(key.seed))).decode(),
             "address": encode_address(key.address)}
    return json.dumps({**entry, **changes})


def stored_entry_cases() -> list[tuple[str, str, dict]]:
    return [
        ("an entry at INTERACTIVE", python_stored_entry(KEY, PASSWORD), {"address": encode_address(KEY.address)}),
        ("an edited address", python_stored_entry(KEY, PASSWORD, address=encode_address(OTHER.address)), {
            "error": "KeyFileError",
            "message": "the stored key's address does not match the key inside it (the entry was edited)"}),
        ("a cost lowered below INTERACTIVE", python_stored_entry(KEY, PASSWORD, memlimit=8192), {
            "error": "KeyFileError", "message": "the stored key: argon2id memlimit 8192 is weaker than the 67108864 "
                                                "accepted (libsodium's INTERACTIVE level); the file was not written "
                                                "by Trolly"}),
        ("not JSON", "trolly1...", {"error": "KeyFileError",
                                    "message": "the stored key is not JSON: not a key this page stored"}),
        ("another format", json.dumps({"format": "x"}), {
            "error": "KeyFileError", "message": "the stored key is not a trolly-browser-key/1 entry"}),
    ]
