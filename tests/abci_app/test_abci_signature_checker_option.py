"""The signature checker is an option of the node, handed to the application: config.toml `[trolly]
signature_checker` or `trolly-node start --signature-checker`, and the same answers either way."""

from __future__ import annotations

import tomllib

import pytest
import tomli_w
from abci_helpers import CHAIN_ID, FakeStore, genesis_bytes, key_for, send_tx
from click.testing import CliRunner
from google.protobuf.timestamp_pb2 import Timestamp

from trolly.abci_app import cli
from trolly.abci_app import home as homelib
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.signature_checker import MIN_BATCH, SignatureChecker
from trolly.chain.checked_txs import CheckedTxs

SENDERS = [key_for(100 + index) for index in range(MIN_BATCH + 8)]
START = 1_000_000


def test_a_new_home_turns_the_checker_on_and_a_config_can_turn_it_off(tmp_path):
    on = homelib.config_toml(homelib.NodeConfig())
    off = homelib.config_toml(homelib.NodeConfig(signature_checker=False))
    assert homelib.signature_checker_enabled(on) and not homelib.signature_checker_enabled(off)
    assert homelib.signature_checker_enabled({})  # a config.toml written by `cometbft init`: no [trolly]
    written = tmp_path / "config.toml"
    written.write_text(tomli_w.dumps(off))
    assert tomllib.loads(written.read_text())["trolly"]["signature_checker"] is False


@pytest.mark.parametrize("document, complaint", [
    ({"trolly": {"signature_checker": "off"}}, "must be true or false"),
    ({"trolly": {"signature_checker": 1}}, "must be true or false"),
    ({"trolly": "on"}, "must be a table"),
])
def test_a_malformed_option_is_refused_with_its_name(document, complaint):
    with pytest.raises(homelib.HomeError, match=complaint):
        homelib.signature_checker_enabled(document)


@pytest.fixture
def home(tmp_path):
    result = CliRunner().invoke(cli.main, ["init", "--home", str(tmp_path / "h"), "--chain-id", "opt-test"])
    assert result.exit_code == 0, result.output
    return tmp_path / "h"


def served_with(monkeypatch) -> list[bool]:
    """Stands in for the server (a unit-test fake): records the checker option `start` hands it."""
    seen: list[bool] = []

    async def fake_serve(root, address, exit_height, signature_checker, *metrics_settings):
        seen.append(signature_checker)

    monkeypatch.setattr(cli, "_serve_app", fake_serve)
    return seen


@pytest.mark.parametrize("flag, config_value, expected", [
    (None, None, True), (None, False, False), ("on", False, True), ("off", True, False),
])
def test_start_takes_the_flag_over_the_config_file(home, monkeypatch, flag, config_value, expected):
    if config_value is not None:
        config = home / "config" / "config.toml"
        document = tomllib.loads(config.read_text())
        document["trolly"] = {"signature_checker": config_value}
        config.write_text(tomli_w.dumps(document))
    seen = served_with(monkeypatch)
    arguments = ["start", "--home", str(home)] + (["--signature-checker", flag] if flag else [])
    result = CliRunner().invoke(cli.main, arguments)
    assert result.exit_code == 0, result.output
    assert seen == [expected]


def test_start_refuses_a_malformed_config_option_and_serves_nothing(home, monkeypatch):
    config = home / "config" / "config.toml"
    config.write_text(config.read_text().replace("signature_checker = true", 'signature_checker = "maybe"'))
    seen = served_with(monkeypatch)
    result = CliRunner().invoke(cli.main, ["start", "--home", str(home)])
    assert result.exit_code != 0 and "signature_checker must be true or false" in result.output
    assert seen == []


def test_start_refuses_an_unknown_flag_value(home):
    result = CliRunner().invoke(cli.main, ["start", "--home", str(home), "--signature-checker", "maybe"])
    assert result.exit_code != 0 and "maybe" in result.output


def run_blocks(app: TrollyApplication, check_first: bool) -> list[tuple[list[int], bytes]]:
    """Two blocks of sends (with a forged signature, a replay and garbage among them): per block the result
    codes and the app hash. `check_first`: the transactions went through CheckTx before the block."""
    recipient = key_for(1).address
    blocks = []
    for height in (1, 2):
        txs = [send_tx(key, recipient, 1 + height, height - 1) for key in SENDERS]
        txs[2] = txs[2][:-1] + bytes([txs[2][-1] ^ 1])
        txs[5] = txs[4]
        txs[9] = b"\x00garbage"
        blocks.append(txs)
    out = []
    for height, txs in enumerate(blocks, start=1):
        if check_first:
            for tx in txs:
                app.check_tx(abci.RequestCheckTx(tx=tx, type=abci.NEW))
        response = app.finalize_block(abci.RequestFinalizeBlock(
            height=height, txs=txs, time=Timestamp(seconds=1_700_000_000 + height)))
        app.commit(abci.RequestCommit())
        out.append(([result.code for result in response.tx_results], response.app_hash))
    return out


def started(**helpers) -> TrollyApplication:
    app = TrollyApplication(FakeStore(), **helpers)
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                         app_state_bytes=genesis_bytes({key: START for key in SENDERS})))
    return app


@pytest.mark.slow
def test_the_app_gives_the_same_codes_and_app_hashes_with_the_checker_on_and_off():
    checker = SignatureChecker()
    try:
        assert checker.start(wait=60), "the signature checker process did not start"
        with_checker = run_blocks(started(checks=CheckedTxs(), signature_checker=checker), check_first=False)
        assert checker.pid is not None
    finally:
        checker.close()
    without = run_blocks(started(checks=CheckedTxs(), signature_checker=SignatureChecker(enabled=False)), False)
    checked_first = run_blocks(started(), check_first=True)
    assert with_checker == without == checked_first
    codes = with_checker[0][0]
    assert codes[2] != 0 and codes[5] != 0 and codes[9] != 0 and codes.count(0) == len(codes) - 3
