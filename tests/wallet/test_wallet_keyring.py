"""wallet.keyring and wallet.armor: keys on disk, encrypted, with nothing secret in plaintext."""

import base64
import json
import stat

import nacl.pwhash.argon2id as argon2id
import pytest

from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEFAULT_PATH, key_from_mnemonic
from trolly.wallet.armor import decrypt_armor, encrypt_armor
from trolly.wallet.errors import KeyExists, KeyNotFound, KeyringError, WrongPassword
from trolly.wallet import keyring as keyring_module
from trolly.wallet.keyring import STRONGEST_ACCEPTED, TEST_BACKEND_WARNING, WEAKEST_ACCEPTED, KdfParams, Keyring
from trolly.wallet.passwords import PasswordSource

PASSWORD = "correct horse battery"
MNEMONIC = (
    "legal winner thank year wave sausage worth useful legal winner thank year wave sausage worth useful "
    "legal winner thank year wave sausage worth title"
)


FAST = KdfParams(argon2id.OPSLIMIT_MIN, argon2id.MEMLIMIT_MIN)
"""libsodium's floor, far below what a real keyring may use: through the test-only argument, to keep tests fast."""


def file_keyring(home, password=PASSWORD):
    return Keyring(home, "file", PasswordSource.fixed(password), FAST, weak_kdf_for_tests=True)


def secrets_of(key, mnemonic=None):
    """Every form in which the secret could leak into a file."""
    seed = key.seed
    forms = [seed, seed.hex().encode(), seed.hex().upper().encode(), base64.b64encode(seed), bytes(key._key._signing_key)]
    forms.append(base64.b64encode(bytes(key._key._signing_key)))
    if mnemonic:
        forms += [mnemonic.encode(), " ".join(mnemonic.split()[:3]).encode()]
    return forms


def all_file_bytes(home):
    return [(path, path.read_bytes()) for path in home.rglob("*") if path.is_file()]


def test_recovered_key_matches_the_chain_derivation(tmp_path):
    info = file_keyring(tmp_path).recover("alice", MNEMONIC)
    expected = key_from_mnemonic(MNEMONIC, DEFAULT_PATH)
    assert info.address == encode_address(expected.address)
    assert info.pubkey == expected.pubkey
    assert file_keyring(tmp_path).signer("alice").seed == expected.seed


def test_file_backend_writes_no_seed_private_key_or_mnemonic(tmp_path):
    keyring = file_keyring(tmp_path)
    _, mnemonic = keyring.create("alice")
    keyring.recover("bob", MNEMONIC)
    alice, bob = file_keyring(tmp_path).signer("alice"), file_keyring(tmp_path).signer("bob")
    files = all_file_bytes(tmp_path)
    assert len(files) == 3  # keyring.json and two key files
    for path, content in files:
        for secret in secrets_of(alice, mnemonic) + secrets_of(bob, MNEMONIC) + [PASSWORD.encode()]:
            assert secret not in content, f"{path} leaks a secret"


def test_files_are_0600_and_directories_0700(tmp_path):
    home = tmp_path / "home"
    file_keyring(home).create("alice")
    Keyring(home, "test").create("bob")
    for path in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} has mode {oct(mode)}"


def test_wrong_password_is_refused_and_changes_nothing(tmp_path):
    file_keyring(tmp_path).create("alice")
    before = all_file_bytes(tmp_path)
    with pytest.raises(WrongPassword):
        file_keyring(tmp_path, "not the password").signer("alice")
    with pytest.raises(WrongPassword):
        file_keyring(tmp_path, "not the password").create("bob")
    assert all_file_bytes(tmp_path) == before


def test_password_is_asked_once_per_keyring_object(tmp_path):
    asked = []
    source = PasswordSource(environment={}, prompt=lambda text, confirm: asked.append(confirm) or PASSWORD)
    keyring = Keyring(tmp_path, "file", source, FAST, weak_kdf_for_tests=True)
    keyring.create("alice")
    keyring.create("bob")
    keyring.signer("alice")
    keyring.signer("bob")
    assert asked == [True]  # one prompt, with confirmation, because it created the keyring

    asked.clear()
    again = Keyring(tmp_path, "file", PasswordSource(environment={}, prompt=lambda t, c: asked.append(c) or PASSWORD),
                    weak_kdf_for_tests=True)
    again.signer("alice")
    again.signer("bob")
    assert asked == [False]


def test_password_sources_in_order_file_then_environment_then_prompt(tmp_path):
    password_file = tmp_path / "pw"
    password_file.write_text("from-file-123\nignored second line\n")
    environment = {"TROLLY_WALLET_PASSWORD": "from-env-123"}
    assert PasswordSource(password_file, environment, lambda t, c: "prompt").get() == "from-file-123"
    assert PasswordSource(None, environment, lambda t, c: "prompt").get() == "from-env-123"
    assert PasswordSource(None, {}, lambda t, c: "from-prompt").get() == "from-prompt"
    with pytest.raises(KeyringError, match="--password-file"):
        PasswordSource(None, {}, None).get()


def test_short_new_password_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(KeyringError, match="at least 8"):
        file_keyring(tmp_path / "home", "short").create("alice")
    assert not (tmp_path / "home" / "keyring-file" / "keyring.json").exists()
    assert not list((tmp_path / "home").rglob("*.key.json"))


def test_list_show_and_delete_need_no_password(tmp_path):
    file_keyring(tmp_path).create("bob")
    file_keyring(tmp_path).create("alice")
    locked = Keyring(tmp_path, "file", PasswordSource(environment={}))  # would raise if asked
    assert [k.name for k in locked.list()] == ["alice", "bob"]
    assert locked.get("alice").address.startswith("trolly1")
    locked.delete("alice")
    assert [k.name for k in locked.list()] == ["bob"]
    with pytest.raises(KeyNotFound):
        locked.get("alice")


def test_duplicate_and_invalid_names_are_refused(tmp_path):
    keyring = file_keyring(tmp_path)
    keyring.create("alice")
    with pytest.raises(KeyExists):
        keyring.create("alice")
    for bad in ["", "../evil", ".hidden", "a/b", "x" * 65]:
        with pytest.raises(KeyringError, match="invalid key name"):
            keyring.create(bad)


def test_test_backend_is_unencrypted_and_labelled(tmp_path):
    keyring = Keyring(tmp_path, "test")
    info, _ = keyring.create("dev")
    record = json.loads((tmp_path / "keyring-test" / "dev.key.json").read_text())
    assert record["WARNING"] == TEST_BACKEND_WARNING
    assert "mnemonic" not in json.dumps(record)
    assert encode_address(Keyring(tmp_path, "test").signer("dev").address) == info.address
    assert Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD)).list() == []  # backends are separate


def test_invalid_mnemonic_is_refused(tmp_path):
    words = MNEMONIC.split()
    words[-1] = "zoo"  # wrong checksum word
    with pytest.raises(KeyringError, match="invalid mnemonic"):
        file_keyring(tmp_path).recover("alice", " ".join(words))
    assert file_keyring(tmp_path).list() == []


def test_armor_round_trips_and_refuses_wrong_password_or_edited_header(tmp_path):
    key = key_from_mnemonic(MNEMONIC)
    armor = encrypt_armor(key, "export-password", FAST, weak_kdf_for_tests=True)
    assert key.seed.hex() not in armor and base64.b64encode(key.seed).decode() not in armor
    assert decrypt_armor(armor, "export-password", weak_kdf_for_tests=True).seed == key.seed
    with pytest.raises(WrongPassword):
        decrypt_armor(armor, "other-password", weak_kdf_for_tests=True)
    other = encode_address(key_from_mnemonic(MNEMONIC, "m/44'/7777'/0'/0'/1'").address)
    edited = armor.replace(encode_address(key.address), other)
    with pytest.raises(KeyringError, match="does not match"):
        decrypt_armor(edited, "export-password", weak_kdf_for_tests=True)
    with pytest.raises(KeyringError, match="not an armored"):
        decrypt_armor("hello", "export-password")


# ---- argon2id cost: MODERATE for new files, bounded when read ------------------------------------------------


class RecordingKdf:
    """Stands in for argon2id (inside this test only): records the cost asked for, derives a fixed key."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[int, int]] = []
        monkeypatch.setattr(keyring_module.argon2id, "kdf", self.kdf)

    def kdf(self, size, password, salt, opslimit, memlimit):
        self.calls.append((opslimit, memlimit))
        return bytes(size)


def test_new_keyrings_and_armors_default_to_moderate_argon2id_or_stronger(tmp_path, monkeypatch):
    assert KdfParams().opslimit >= argon2id.OPSLIMIT_MODERATE and KdfParams().memlimit >= argon2id.MEMLIMIT_MODERATE
    assert argon2id.MEMLIMIT_MODERATE == 256 * 1024 * 1024
    recorded = RecordingKdf(monkeypatch)
    Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD)).create("alice")  # the CLI's construction
    armor = encrypt_armor(key_from_mnemonic(MNEMONIC), "export-password")
    moderate = (argon2id.OPSLIMIT_MODERATE, argon2id.MEMLIMIT_MODERATE)
    assert recorded.calls == [moderate, moderate]
    stored = json.loads((tmp_path / "keyring-file" / "keyring.json").read_text())["kdf"]
    assert (stored["opslimit"], stored["memlimit"]) == moderate
    assert f"opslimit: {moderate[0]}" in armor and f"memlimit: {moderate[1]}" in armor


def test_a_keyring_written_with_the_former_interactive_parameters_still_opens(tmp_path):
    Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).recover("alice", MNEMONIC)
    stored = json.loads((tmp_path / "keyring-file" / "keyring.json").read_text())["kdf"]
    assert (stored["opslimit"], stored["memlimit"]) == (argon2id.OPSLIMIT_INTERACTIVE, argon2id.MEMLIMIT_INTERACTIVE)
    assert Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD)).signer("alice").seed == \
        key_from_mnemonic(MNEMONIC).seed


def test_a_new_keyring_weaker_than_the_minimum_is_refused_without_the_test_argument(tmp_path):
    with pytest.raises(KeyringError, match="weaker than"):
        Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD), FAST)
    with pytest.raises(KeyringError, match="weaker than"):
        encrypt_armor(key_from_mnemonic(MNEMONIC), "export-password", FAST)


HOSTILE_COSTS = [
    ({"memlimit": 64 * 1024**3}, "more than"),                        # 64 GiB of memory
    ({"opslimit": 2**32 - 1}, "more than"),                            # billions of passes
    ({"opslimit": STRONGEST_ACCEPTED.opslimit + 1}, "more than"),
    ({"memlimit": STRONGEST_ACCEPTED.memlimit + 1024}, "more than"),
    ({"opslimit": 1}, "weaker than"),
    ({"memlimit": 8192}, "weaker than"),
    ({"opslimit": -3}, "weaker than"),
    ({"opslimit": "3"}, "must be an integer"),
    ({"memlimit": 2.5e8}, "must be an integer"),
    ({"opslimit": True}, "must be an integer"),
    ({"opslimit": None}, "must be an integer"),
]


@pytest.mark.parametrize("change, message", HOSTILE_COSTS)
def test_a_keyring_file_asking_for_too_much_or_too_little_is_refused_before_any_hashing(tmp_path, monkeypatch,
                                                                                       change, message):
    Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).initialize()
    path = tmp_path / "keyring-file" / "keyring.json"
    meta = json.loads(path.read_text())
    meta["kdf"].update(change)
    path.write_text(json.dumps(meta))
    recorded = RecordingKdf(monkeypatch)

    def never_asked(text, confirm):
        raise AssertionError("the password was asked for before the parameters were checked")

    keyring = Keyring(tmp_path, "file", PasswordSource(environment={}, prompt=never_asked))
    with pytest.raises(KeyringError, match=message):
        keyring.create("alice")
    assert recorded.calls == [] and not list(tmp_path.rglob("*.key.json"))


def test_the_test_argument_lifts_only_the_lower_bound(tmp_path):
    with pytest.raises(KeyringError, match="more than"):
        Keyring(tmp_path, "file", PasswordSource.fixed(PASSWORD), KdfParams(3, 64 * 1024**3), weak_kdf_for_tests=True)


@pytest.mark.parametrize("salt", ["", "AAAA", "not base64!"])
def test_a_keyring_file_with_a_bad_salt_is_refused(tmp_path, salt):
    file_keyring(tmp_path).initialize()
    path = tmp_path / "keyring-file" / "keyring.json"
    meta = json.loads(path.read_text())
    meta["kdf"]["salt"] = salt
    path.write_text(json.dumps(meta))
    with pytest.raises(KeyringError, match="salt"):
        file_keyring(tmp_path).create("alice")


@pytest.mark.parametrize("opslimit, memlimit, message", [
    ("3", str(64 * 1024**3), "more than"), (str(2**32 - 1), "268435456", "more than"), ("1", "268435456", "weaker than"),
    ("3_0", "268435456", "malformed armor header"), ("-3", "268435456", "malformed armor header"),
    ("9" * 5000, "268435456", "malformed armor header"),
])
def test_an_armor_asking_for_too_much_is_refused_before_any_hashing(monkeypatch, opslimit, memlimit, message):
    armor = encrypt_armor(key_from_mnemonic(MNEMONIC), "export-password", FAST, weak_kdf_for_tests=True)
    edited = armor.replace(f"opslimit: {FAST.opslimit}\n", f"opslimit: {opslimit}\n")
    edited = edited.replace(f"memlimit: {FAST.memlimit}\n", f"memlimit: {memlimit}\n")
    recorded = RecordingKdf(monkeypatch)
    with pytest.raises(KeyringError, match=message):
        decrypt_armor(edited, "export-password")
    assert recorded.calls == []
