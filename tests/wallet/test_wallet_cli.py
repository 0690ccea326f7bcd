"""The trolly-wallet CLI with CliRunner: a hermetic home, and a fake node running the real chain rules."""

import base64
import json
import os
import shutil
import stat

import click
import pytest
from click.testing import CliRunner

from trolly.chain.crypto import encode_address
from trolly.chain.hd import DEV_MNEMONIC, dev_key
from trolly.wallet.cli import cli
from trolly.wallet.keyring import WEAKEST_ACCEPTED, Keyring
from trolly.wallet.passwords import PasswordSource

from wallet_cli_helpers import fails_with, hermetic, invoke_wallet, ok_json
from wallet_helpers import DEV_BALANCE, fake_node  # noqa: F401  (fixture)

PASSWORD = "wallet-password-1"
DEV_ADDRESS = encode_address(dev_key(0).address)


@pytest.fixture
def home(tmp_path):
    """A wallet home whose file keyring exists already, made with the weakest parameters a keyring may name
    (libsodium INTERACTIVE, the former default): every command below opens it as it would open a keyring
    from before, and each unlock costs a quarter of the MODERATE default's memory."""
    home = tmp_path / "wallet-home"
    Keyring(home, "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).initialize()
    return home


@pytest.fixture
def wallet(home, monkeypatch):
    """Run the CLI in the hermetic home; environment variables from the caller's shell cannot leak in."""
    hermetic(monkeypatch)

    def run(*args, input=None, password=PASSWORD, node=None):
        env = {"TROLLY_WALLET_HOME": str(home)}
        if password is not None:
            env["TROLLY_WALLET_PASSWORD"] = password
        if node is not None:
            env["TROLLY_NODE"] = node.url
        return invoke_wallet(args, env, input)

    return run


def snapshot(home):
    return {str(p): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file() and p.name != "nonces.json"}


def add_dev_key(wallet, backend="file"):
    result = wallet("keys", "add", "dev", "--recover", "--keyring-backend", backend, "-o", "json", input=DEV_MNEMONIC + "\n")
    assert ok_json(result)["address"] == DEV_ADDRESS


# ---- help ------------------------------------------------------------------------------------------------------


def all_commands(group: click.Group, ctx: click.Context, prefix=()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from all_commands(command, click.Context(command, parent=ctx), prefix + (name,))


def test_every_command_has_help_text(wallet):
    commands = list(all_commands(cli, click.Context(cli)))
    names = {" ".join(path) for path, _ in commands}
    assert {"keys add", "keys list", "keys show", "keys export", "keys import", "keys delete", "tx send",
            "tx broadcast", "tx stake create-validator", "tx stake bond", "tx stake unbond", "tx stake unjail",
            "query account", "query validators", "query tx", "query status", "query signing-info",
            "tx stake delegate", "tx stake undelegate", "tx stake redelegate", "tx stake withdraw-rewards",
            "tx stake edit-validator", "query delegations", "query rewards", "query validator"} <= names
    for path, command in [((), cli)] + commands:
        assert command.help and len(command.help.strip()) > 10, f"{path} has no help text"
        result = wallet(*path, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output
        if not isinstance(command, click.Group):
            for param in command.params:
                if isinstance(param, click.Option):
                    assert param.help, f"{' '.join(path)} {param.opts} has no help"


# ---- keys -------------------------------------------------------------------------------------------------------


def test_keys_add_shows_the_mnemonic_once_and_stores_none_of_it(wallet, home):
    result = wallet("keys", "add", "alice")
    assert result.exit_code == 0, result.output
    words = [line for line in result.stdout.splitlines() if len(line.split()) == 24]
    assert len(words) == 1 and "only way to recover" in result.stdout
    mnemonic = words[0]
    for content in snapshot(home).values():
        assert mnemonic.encode() not in content and mnemonic.split()[0].encode() + b" " not in content
    shown = ok_json(wallet("keys", "show", "alice", "-o", "json"))
    assert "mnemonic" not in shown and shown["address"].startswith("trolly1")
    assert wallet("keys", "show", "alice", "--address").stdout.strip() == shown["address"]
    listed = ok_json(wallet("keys", "list", "-o", "json"))
    assert [k["name"] for k in listed] == ["alice"]


def test_keys_add_recover_derives_the_documented_path(wallet):
    add_dev_key(wallet)
    second = ok_json(wallet("keys", "add", "dev1", "--recover", "--index", "1", "-o", "json", input=DEV_MNEMONIC + "\n"))
    assert second["address"] == encode_address(dev_key(1).address)
    assert second["path"] == "m/44'/7777'/0'/0'/1'"


def test_password_from_a_prompt_is_asked_once_per_command(wallet, home):
    shutil.rmtree(home / "keyring-file")  # `keys add` creates the keyring (at the MODERATE default) and asks
    result = wallet("keys", "add", "alice", input=f"{PASSWORD}\n{PASSWORD}\n", password=None)
    assert result.exit_code == 0 and result.stderr.count("New password") == 1  # plus its confirmation
    password_file = home.parent / "password.txt"
    password_file.write_text(PASSWORD + "\n")
    exported = wallet("keys", "export", "alice", "--armor-password-file", password_file, input=f"{PASSWORD}\n",
                      password=None)
    assert exported.exit_code == 0 and exported.stderr.count("Password for the keyring") == 1
    with_file = wallet("keys", "export", "alice", "--password-file", password_file, "--armor-password-file",
                       password_file, password=None)
    assert with_file.exit_code == 0 and "Password" not in with_file.stderr


def test_wrong_password_exits_4_and_changes_nothing(wallet, home):
    wallet("keys", "add", "alice")
    before = snapshot(home)
    fails_with(wallet("keys", "export", "alice", password="wrong-password"), 4, "wrong keyring password")
    fails_with(wallet("keys", "add", "bob", password="wrong-password"), 4, "wrong keyring password")
    assert snapshot(home) == before


def test_unknown_key_exits_5(wallet):
    fails_with(wallet("keys", "show", "nobody"), 5, "unknown key name 'nobody'")
    fails_with(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "nobody", "--yes"), 5, "unknown key name")


def test_keys_delete_asks_first(wallet, home):
    wallet("keys", "add", "alice")
    kept = wallet("keys", "delete", "alice", input="n\n")
    assert kept.exit_code == 1 and "Delete key 'alice'" in kept.stderr
    assert (home / "keyring-file" / "alice.key.json").exists()
    assert wallet("keys", "delete", "alice", input="y\n").exit_code == 0
    assert not (home / "keyring-file" / "alice.key.json").exists()


def test_export_import_moves_a_key_between_homes(wallet, home, tmp_path):
    add_dev_key(wallet)
    armor_password = tmp_path / "armor.txt"
    armor_password.write_text("armor-password-9\n")
    armor_file = tmp_path / "dev.armor"
    assert wallet("keys", "export", "dev", "--armor-password-file", armor_password, "--out", armor_file).exit_code == 0
    text = armor_file.read_text()
    assert text.startswith("-----BEGIN TROLLY PRIVATE KEY-----") and dev_key(0).seed.hex() not in text
    other = CliRunner().invoke(cli, ["keys", "import", "moved", str(armor_file), "--armor-password-file",
                                     str(armor_password), "--home", str(tmp_path / "other"), "-o", "json"],
                               env={"TROLLY_WALLET_PASSWORD": "another-password"})
    assert json.loads(other.stdout)["address"] == DEV_ADDRESS
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("not-the-armor-password\n")
    refused = wallet("keys", "import", "again", armor_file, "--armor-password-file", wrong)
    fails_with(refused, 4, "wrong password for this armored key")


def test_export_to_a_file_leaves_the_mode_of_an_existing_folder_alone_and_makes_new_folders_private(wallet,
                                                                                                     tmp_path):
    add_dev_key(wallet)
    armor_password = tmp_path / "armor.txt"
    armor_password.write_text("armor-password-9\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    for armor_file in (shared / "dev.armor", shared / "new" / "deeper" / "dev.armor"):
        assert wallet("keys", "export", "dev", "--armor-password-file", armor_password, "--out",
                      armor_file).exit_code == 0
        assert stat.S_IMODE(armor_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    for created in (shared / "new", shared / "new" / "deeper"):
        assert stat.S_IMODE(created.stat().st_mode) & 0o077 == 0


# ---- transactions ---------------------------------------------------------------------------------------------


def balance(wallet, node, who):
    return ok_json(wallet("query", "account", who, "-o", "json", node=node))["balance"]


def test_send_waits_for_the_block_and_reports_height(wallet, fake_node):
    add_dev_key(wallet)
    bob = ok_json(wallet("keys", "add", "bob", "-o", "json"))["address"]
    sent = ok_json(wallet("tx", "send", bob, "1.5trl", "--from", "dev", "--fees", "2utrl", "--yes", "-o", "json",
                          node=fake_node))
    assert sent["included"] and sent["code"] == 0 and sent["height"] >= 2
    assert sent["tx"]["messages"] == [{"type": "/trolly.bank.v1.MsgSend", "fields": {"to": bob, "amount": 1_500_000}}]
    assert balance(wallet, fake_node, "bob") == 1_500_000
    # dev also operates the only validator, so the 2utrl fee may come back to it as the validators' fee share
    assert DEV_BALANCE - 1_500_002 <= balance(wallet, fake_node, "dev") <= DEV_BALANCE - 1_500_000
    found = ok_json(wallet("query", "tx", sent["hash"].lower(), "-o", "json", node=fake_node))
    assert found["height"] == sent["height"] and found["tx"]["signer"] == DEV_ADDRESS
    text = wallet("tx", "send", "bob", "1utrl", "--from", "dev", "--yes", node=fake_node)
    assert text.exit_code == 0 and "height" in text.stdout and "Transaction included" in text.stdout


def test_two_quick_sends_in_a_row_both_succeed(wallet, fake_node):
    add_dev_key(wallet, backend="test")
    fake_node.producing = False  # nothing is committed between the two sends: the node's nonce stays 0
    first = ok_json(wallet("tx", "send", "trolly1" + DEV_ADDRESS[7:], "1utrl", "--from", "dev", "--keyring-backend",
                           "test", "--yes", "--no-wait", "-o", "json", node=fake_node))
    second = ok_json(wallet("tx", "send", DEV_ADDRESS, "2utrl", "--from", "dev", "--keyring-backend", "test",
                            "--yes", "--no-wait", "-o", "json", node=fake_node))
    assert (first["nonce"], second["nonce"]) == (0, 1) and not second["included"]
    fake_node.producing = True
    fake_node.wait_blocks(2)
    assert fake_node.account(dev_key(0).address).nonce == 2


def test_confirmation_prompt_shows_the_tx_and_no_means_nothing_sent(wallet, fake_node):
    add_dev_key(wallet)
    declined = wallet("tx", "send", DEV_ADDRESS, "3trl", "--from", "dev", input="n\n", node=fake_node)
    assert declined.exit_code == 1 and "3trl (3000000utrl)" in declined.stderr and "MsgSend" in declined.stderr
    assert fake_node.broadcasts == 0
    accepted = wallet("tx", "send", DEV_ADDRESS, "3trl", "--from", "dev", input="y\n", node=fake_node)
    assert accepted.exit_code == 0 and fake_node.broadcasts == 1


def test_dry_run_checks_but_signs_and_sends_nothing(wallet, fake_node, home):
    add_dev_key(wallet)
    result = ok_json(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "dev", "--dry-run", "-o", "json",
                            password="not-even-asked", node=fake_node))
    assert result["dry_run"] and result["tx"]["total_spend"] == 1_000_000
    assert fake_node.broadcasts == 0


def test_generate_only_then_broadcast(wallet, fake_node, tmp_path):
    add_dev_key(wallet)
    generated = ok_json(wallet("tx", "send", DEV_ADDRESS, "4utrl", "--from", "dev", "--generate-only", "--yes",
                               "-o", "json", node=fake_node))
    assert fake_node.broadcasts == 0 and generated["body"]["nonce"] == 0
    signed_file = tmp_path / "signed.json"
    signed_file.write_text(json.dumps(generated))
    sent = ok_json(wallet("tx", "broadcast", signed_file, "--yes", "-o", "json", node=fake_node))
    assert sent["hash"] == generated["hash"] and sent["included"] and sent["code"] == 0
    # plain base64 on stdin works too; fully offline signing needs no node at all
    offline = wallet("tx", "send", DEV_ADDRESS, "5utrl", "--from", "dev", "--generate-only", "--yes", "--chain-id",
                     "trolly-fake", "--nonce", "1", "--fees", "0", node=None)
    assert offline.exit_code == 0
    again = ok_json(wallet("tx", "broadcast", "-", "--yes", "-o", "json", input=offline.stdout, node=fake_node))
    assert again["included"] and again["nonce"] == 1


def test_failed_commands_leave_balances_and_keyring_exactly_as_before(wallet, fake_node, home, tmp_path):
    add_dev_key(wallet)
    poor = ok_json(wallet("keys", "add", "poor", "-o", "json"))["address"]
    before_keys = snapshot(home)
    before = (balance(wallet, fake_node, "dev"), balance(wallet, fake_node, poor))
    bad_address = DEV_ADDRESS[:-1] + ("q" if DEV_ADDRESS[-1] != "q" else "p")
    fails_with(wallet("tx", "send", poor, "1trl", "--from", "dev", "--yes", password="wrong-password",
                      node=fake_node), 4, "wrong keyring password")
    fails_with(wallet("tx", "send", DEV_ADDRESS, "1trl", "--from", "poor", "--yes", node=fake_node),
               8, "insufficient funds")
    fails_with(wallet("tx", "send", bad_address, "1trl", "--from", "dev", "--yes", node=fake_node),
               6, "bad bech32 checksum")
    fails_with(wallet("tx", "send", poor, "1.0000001trl", "--from", "dev", "--yes", node=fake_node),
               7, "at most 6 decimals")
    fails_with(wallet("tx", "stake", "bond", "1trl", "--from", "dev", "--yes", "--fees", "-3", node=fake_node),
               7, "negative")
    down = wallet("tx", "send", poor, "1trl", "--from", "dev", "--yes", "--node", "http://127.0.0.1:9")
    fails_with(down, 3, "node unreachable at http://127.0.0.1:9")
    fails_with(wallet("query", "account", bad_address, node=fake_node), 6, "invalid address")
    assert snapshot(home) == before_keys
    assert (balance(wallet, fake_node, "dev"), balance(wallet, fake_node, poor)) == before
    assert fake_node.broadcasts == 0


def test_rejected_tx_exits_9_and_timeout_exits_10(wallet, fake_node):
    add_dev_key(wallet)
    rejected = wallet("tx", "stake", "unbond", "100000trl", "--from", "dev", "--yes", node=fake_node)
    fails_with(rejected, 9, "code")
    assert "stake" in rejected.stderr
    fake_node.producing = False
    timed_out = wallet("tx", "send", DEV_ADDRESS, "1utrl", "--from", "dev", "--yes", "--timeout", "0.5", node=fake_node)
    fails_with(timed_out, 10, "not included in a block after 0.5s")


def test_stake_create_bond_unbond_changes_power(wallet, fake_node):
    add_dev_key(wallet)
    operator = ok_json(wallet("keys", "add", "val", "-o", "json"))["address"]
    assert wallet("tx", "send", "val", "100trl", "--from", "dev", "--yes", node=fake_node).exit_code == 0
    consensus = base64.b64encode(dev_key(7).pubkey).decode()
    created = wallet("tx", "stake", "create-validator", "--stake", "20trl", "--moniker", "second", "--consensus-pubkey",
                     consensus, "--from", "val", "--yes", "-o", "json", node=fake_node)
    assert ok_json(created)["code"] == 0

    def power():
        validators = ok_json(wallet("query", "validators", "-o", "json", node=fake_node))
        return {v["operator"]: v["power"] for v in validators}[operator]

    assert power() == 20
    assert wallet("tx", "stake", "bond", "5trl", "--from", "val", "--yes", node=fake_node).exit_code == 0
    assert power() == 25
    assert wallet("tx", "stake", "unbond", "15trl", "--from", "val", "--yes", node=fake_node).exit_code == 0
    assert power() == 10
    fake_node.wait_blocks(5)  # the fake chain unbonds in 4 blocks: the 15trl are back with the operator
    pending = ok_json(wallet("query", "unbonding", "val", "-o", "json", node=fake_node))
    assert pending.pop("proof")["note"].startswith("proved at height ")
    assert pending == {"delegator": operator, "entries": [], "total": 0}
    assert ok_json(wallet("query", "account", "val", "-o", "json", node=fake_node))["balance"] == 90_000_000
    consensus_set = ok_json(wallet("query", "validators", "--consensus", "-o", "json", node=fake_node))
    assert sorted(v["voting_power"] for v in consensus_set) == [10, 10]
    text = wallet("query", "validators", node=fake_node)
    assert "second" in text.stdout and "dev" in text.stdout and "proved at height" in text.stdout


def test_unjail_of_a_validator_that_is_not_jailed_is_refused_with_the_reason_and_signing_info_reads(wallet,
                                                                                                      fake_node):
    """The fake node passes no last commit, so nobody is jailed here; the real path (a localnet validator
    stopped until it is jailed, then unjailed with this command) is tests/localnet/test_cometbft_downtime.py."""
    add_dev_key(wallet)
    info = ok_json(wallet("query", "signing-info", "dev", "-o", "json", node=fake_node))
    assert (info["operator"], info["jailed"], info["tombstoned"], info["missed_blocks_counter"]) == (
        DEV_ADDRESS, False, False, 0)
    assert "missed blocks" in wallet("query", "signing-info", DEV_ADDRESS, node=fake_node).stdout
    generated = ok_json(wallet("tx", "stake", "unjail", "--from", "dev", "--generate-only", "--yes", "-o", "json",
                               node=fake_node))
    assert [m["type"] for m in generated["body"]["messages"]] == ["/trolly.slashing.v1.MsgUnjail"]
    assert fake_node.broadcasts == 0
    refused = wallet("tx", "stake", "unjail", "--from", "dev", "--yes", node=fake_node)
    fails_with(refused, 9, "not jailed")
    fails_with(wallet("query", "signing-info", encode_address(dev_key(3).address), node=fake_node), 12,
               "operates no validator")


def test_delegate_redelegate_withdraw_and_edit_with_their_queries(wallet, fake_node):
    add_dev_key(wallet)
    holder = ok_json(wallet("keys", "add", "holder", "-o", "json"))["address"]
    assert wallet("tx", "send", "holder", "100trl", "--from", "dev", "--yes", node=fake_node).exit_code == 0
    delegated = wallet("tx", "stake", "delegate", DEV_ADDRESS, "30trl", "--from", "holder", "--yes", "-o", "json",
                       node=fake_node)
    assert ok_json(delegated)["code"] == 0
    shown = ok_json(wallet("query", "delegations", "holder", "-o", "json", node=fake_node))
    assert shown["delegator"] == holder and [(r["validator"], r["amount"]) for r in shown["delegations"]] == [
        (DEV_ADDRESS, 30_000_000)]
    validator = ok_json(wallet("query", "validator", DEV_ADDRESS, "-o", "json", node=fake_node))
    assert validator["delegators"] == 2 and validator["commission_rate"] == 1000
    assert "commission" in wallet("query", "validator", DEV_ADDRESS, node=fake_node).stdout
    # fees of the sends above reached the validator: the holder's rewards are counted, then withdrawn
    wallet("tx", "send", "holder", "1utrl", "--from", "dev", "--yes", "--fees", "1trl", node=fake_node)
    earned = ok_json(wallet("query", "rewards", "holder", "-o", "json", node=fake_node))["total"]
    assert earned > 0
    before = ok_json(wallet("query", "account", "holder", "-o", "json", node=fake_node))["balance"]
    withdrawn = wallet("tx", "stake", "withdraw-rewards", DEV_ADDRESS, "--from", "holder", "--yes", "--fees", "0",
                       "-o", "json", node=fake_node)
    assert ok_json(withdrawn)["code"] == 0
    after = ok_json(wallet("query", "account", "holder", "-o", "json", node=fake_node))["balance"]
    assert after >= before + earned
    assert ok_json(wallet("tx", "stake", "undelegate", DEV_ADDRESS, "10trl", "--from", "holder", "--yes", "-o", "json",
                          node=fake_node))["code"] == 0
    shown = ok_json(wallet("query", "delegations", "holder", "-o", "json", node=fake_node))
    assert shown["total"] == 20_000_000
    unbonding = ok_json(wallet("query", "unbonding", "holder", "-o", "json", node=fake_node))
    assert unbonding["delegator"] == holder and unbonding["total"] in (0, 10_000_000)  # the fake chain unbonds fast
    edited = wallet("tx", "stake", "edit-validator", "--moniker", "renamed", "--from", "dev", "--yes", "-o", "json",
                    node=fake_node)
    assert ok_json(edited)["code"] == 0
    assert ok_json(wallet("query", "validator", "dev", "-o", "json", node=fake_node))["moniker"] == "renamed"


def test_stake_commands_generate_only_and_refuse_bad_input(wallet, fake_node):
    add_dev_key(wallet)
    generated = ok_json(wallet("tx", "stake", "delegate", DEV_ADDRESS, "2trl", "--from", "dev", "--generate-only",
                               "--yes", "-o", "json", node=fake_node))
    [message] = generated["body"]["messages"]
    assert message["fields"] == {"validator": DEV_ADDRESS, "amount": 2_000_000}
    stranger = ok_json(wallet("keys", "add", "stranger", "-o", "json"))["address"]
    refused = wallet("tx", "stake", "delegate", stranger, "1trl", "--from", "dev", "--yes", node=fake_node)
    fails_with(refused, 9, "operates no validator")
    fails_with(wallet("tx", "stake", "redelegate", DEV_ADDRESS, DEV_ADDRESS, "1trl", "--from", "dev", "--yes",
                      node=fake_node), 1, "same")
    fails_with(wallet("tx", "stake", "edit-validator", "--commission-rate", "20000", "--from", "dev", "--yes",
                      node=fake_node), 1, "basis points")
    too_fast = wallet("tx", "stake", "edit-validator", "--commission-rate", "1900", "--from", "dev", "--yes",
                      node=fake_node)
    fails_with(too_fast, 9, "at most")


def test_query_account_prove_and_status(wallet, fake_node):
    add_dev_key(wallet)
    proven = ok_json(wallet("query", "account", "dev", "-o", "json", node=fake_node))
    assert proven["balance"] == DEV_BALANCE and proven["proof"]["verified"]
    assert proven["proof"]["note"] == f"proved at height {proven['proof']['query_height']}"
    assert ok_json(wallet("query", "account", "dev", "--prove", "-o", "json", node=fake_node))["proof"]["verified"]
    text = wallet("query", "account", DEV_ADDRESS, node=fake_node)
    assert "proved at height" in text.stdout
    assert proven["pub_key"] is None and "public key" in text.stdout  # this genesis names no key, none signed yet
    status = ok_json(wallet("query", "status", "-o", "json", node=fake_node))
    assert status["chain_id"] == "trolly-fake" and status["latest_block_height"] >= 1
    fake_node.tamper_app_hash = True
    fails_with(wallet("query", "account", "dev", node=fake_node), 11, "does NOT match")


def test_a_node_answering_a_tampered_value_is_refused(wallet, fake_node):
    """Attack: a node answers a balance, a stake or a validator's power that its state does not hold, with a
    valid proof of the true record. The wallet refuses the answer, says which fields differ, and exits 11."""
    add_dev_key(wallet)

    def inflate(path, answer):
        if path == "/validators":
            return [{**answer[0], "power": answer[0]["power"] + 1}] + answer[1:]
        if path.startswith(("/account/", "/validator/")) and isinstance(answer, dict):
            return {**answer, "balance": answer.get("balance", 0) + 1} if "balance" in answer else \
                {**answer, "power": answer["power"] + 1}
        return answer

    fake_node.tamper_answer = inflate
    refused = wallet("query", "account", "dev", node=fake_node)
    fails_with(refused, 11, "balance differ from the proven record")
    assert refused.stdout == ""  # nothing of the lying answer is shown
    fails_with(wallet("query", "validators", node=fake_node), 11, "entries differ from the proven records")
    fake_node.tamper_answer = None
    assert ok_json(wallet("query", "account", "dev", "-o", "json", node=fake_node))["balance"] == DEV_BALANCE


def test_a_validator_detail_and_its_signing_info_are_proven_and_a_tampered_one_refused(wallet, fake_node):
    """Attack: the node answers a validator's stake or commission, or its signing info's missed blocks or
    tombstone, that its state does not hold, with a valid proof of the true record. `query validator` and
    `query signing-info` refuse with exit 11; untampered, each says `proved at height H`."""
    add_dev_key(wallet)
    shown = ok_json(wallet("query", "validator", "dev", "-o", "json", node=fake_node))
    assert shown["proof"]["verified"] and "commission_rate" in shown["proof"]["fields"]
    assert {"self_bond", "delegators"} <= set(shown["proof"]["fields"])  # other keys, each proven too
    assert "proved at height" in wallet("query", "validator", "dev", node=fake_node).stdout
    info = ok_json(wallet("query", "signing-info", "dev", "-o", "json", node=fake_node))
    assert info["proof"]["note"].startswith("proved at height ") and "missed_blocks_counter" in info["proof"]["fields"]
    assert "proved at height" in wallet("query", "signing-info", "dev", node=fake_node).stdout

    def tamper(field, value, prefix):
        fake_node.tamper_answer = lambda path, answer: {**answer, field: value} if path.startswith(prefix) \
            else answer

    tamper("commission_rate", 1, "/validator/")
    refused = wallet("query", "validator", "dev", node=fake_node)
    fails_with(refused, 11, "commission_rate differ from the proven record")
    assert refused.stdout == ""
    # the signing info's answer reads the validator's record itself, proven: a lying /validator/ answer is not used
    assert "proved at height" in wallet("query", "signing-info", "dev", node=fake_node).stdout
    tamper("missed_blocks_counter", 7, "/signing_info/")
    fails_with(wallet("query", "signing-info", "dev", node=fake_node), 11, "missed_blocks_counter differ")
    tamper("tombstoned", True, "/signing_info/")
    fails_with(wallet("query", "signing-info", "dev", node=fake_node), 11, "tombstoned differ")
    tamper("consensus_address", "AB" * 20, "/signing_info/")  # another key's record cannot be passed off either
    fails_with(wallet("query", "signing-info", "dev", node=fake_node), 11, "consensus_address differ")


def test_addresses_of_other_chains_and_garbage_files_fail_cleanly(wallet, fake_node, tmp_path):
    add_dev_key(wallet)
    import bech32

    cosmos = bech32.bech32_encode("cosmos", bech32.convertbits(dev_key(0).address, 8, 5))  # valid, wrong chain
    fails_with(wallet("tx", "send", cosmos, "1trl", "--from", "dev", "--yes", node=fake_node), 6, "prefix must be 'trolly'")
    fails_with(wallet("query", "account", cosmos, node=fake_node), 6, "prefix")
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("this is not base64 !!!")
    fails_with(wallet("tx", "broadcast", garbage, "--yes", node=fake_node), 1, "not a base64 transaction")
    garbage.write_text(base64.b64encode(b"\xff\x00garbage").decode())
    fails_with(wallet("tx", "broadcast", garbage, "--yes", node=fake_node), 1, "not a Trolly transaction")
    assert fake_node.broadcasts == 0


def test_keyring_backend_from_the_environment(wallet, home, monkeypatch):
    monkeypatch.setenv("TROLLY_KEYRING_BACKEND", "test")
    result = wallet("keys", "add", "dev", "--recover", "-o", "json", input=DEV_MNEMONIC + "\n", password=None)
    assert ok_json(result)["backend"] == "test" and (home / "keyring-test" / "dev.key.json").exists()
    listed = wallet("keys", "list")
    assert "UNENCRYPTED" in listed.stderr and "dev" in listed.stdout


def test_names_resolve_across_keyrings_for_recipients_but_not_for_signers(wallet, fake_node):
    add_dev_key(wallet, backend="test")
    alice = ok_json(wallet("keys", "add", "alice", "-o", "json"))["address"]  # file keyring
    sent = ok_json(wallet("tx", "send", "alice", "2utrl", "--from", "dev", "--keyring-backend", "test", "--yes",
                          "-o", "json", node=fake_node))
    assert sent["tx"]["messages"][0]["fields"]["to"] == alice
    assert ok_json(wallet("query", "account", "alice", "--keyring-backend", "test", "-o", "json",
                          node=fake_node))["balance"] == 2
    fails_with(wallet("tx", "send", "alice", "1utrl", "--from", "dev", "--yes", node=fake_node), 5,
               "it is in the test keyring: add --keyring-backend test")
    fails_with(wallet("query", "account", "carol", node=fake_node), 5, "not a key in any keyring")


def test_every_query_listing_and_multi_key_answer_says_proved_at_height(wallet, fake_node):
    """Listings and answers built from many keys were shown unproven before; each now says `proved at height H`
    in text and carries a verified `proof` in JSON."""
    add_dev_key(wallet)
    for command in (("query", "delegations", "dev"), ("query", "rewards", "dev"), ("query", "unbonding", "dev"),
                    ("query", "params"), ("query", "proposals"), ("task", "list", "--all")):
        assert "proved at height" in wallet(*command, node=fake_node).stdout, command
    shown = ok_json(wallet("query", "delegations", "dev", "-o", "json", node=fake_node))
    assert shown["proof"]["verified"] and shown["delegations"] and shown["proof"]["keys"] >= 3
    params = ok_json(wallet("query", "params", "-o", "json", node=fake_node))
    assert params["proof"]["verified"] and "market" in params
