"""`python -m benchmarks.fuzz_chain` end to end on a small stream: two app processes and the reference agree,
nothing crashes, and the last line is the JSON the issue asks for; its adversarial corpus is what it says (each
transaction of the maximum size, read to its last spec and refused there)."""

from __future__ import annotations

import json

import pytest
from abci_helpers import FakeStore

from benchmarks import costly_txs, fuzz_chain
from benchmarks.hostile_txs import CHAIN_ID, KEYS, Signers, genesis_app_state
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.chain.market.errors import InvalidSpec
from trolly.chain.market.spec import validate_spec


@pytest.mark.slow
def test_a_short_soak_reports_zero_crashes_invariant_failures_and_nondeterminism(capsys):
    fuzz_chain.main(["--txs", "400", "--block-txs", "40"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["txs"] >= 400
    assert (result["crashes"], result["invariant_failures"], result["nondeterministic"], result["unknown_codes"]) \
        == (0, 0, 0, 0)
    assert result["distinct_failure_codes"] >= 8  # the stream reached many different checks
    assert result["honest_tx_per_s"] > 0 and result["hostile_tx_per_s"] > 0
    assert result["worst_check_tx_kind"] in costly_txs.COSTLY_SPECS
    assert result["worst_check_tx_ms"] == max(result["check_tx_ms_by_kind"][kind] for kind in costly_txs.COSTLY_SPECS)
    assert result["transfer_check_tx_ms"] == result["check_tx_ms_by_kind"]["transfer"] > 0
    assert result["worst_block_seconds"] > 0 and result["worst_block_txs"] > 300  # 64 KiB each in about 21 MiB


@pytest.mark.slow
def test_a_crashed_app_is_counted_as_a_crash(tmp_path):
    soak = fuzz_chain.Soak(str(tmp_path))
    try:
        soak.start()
        soak.apps[1].process.kill()
        soak.apps[1].process.wait()
        soak.block([])
        assert soak.tally.crashes >= 1
    finally:
        soak.close()


def fuzz_app() -> TrollyApplication:
    app = TrollyApplication(FakeStore())
    app.init_chain(abci.RequestInitChain(chain_id=CHAIN_ID, initial_height=1,
                                         app_state_bytes=json.dumps(genesis_app_state()).encode()))
    return app


REFUSAL = {"escaped_quotes_unclosed": "Unterminated string", "escapes_in_strings": "unknown field(s) x",
           "brackets_in_strings": "unknown field(s) x", "long_key": "unknown field(s) x",
           "many_keys": "unknown field(s) 0", "duplicate_key_last": "duplicate keys", "many_numbers": "unknown field(s) x",
           "deep_allowed": "unknown field(s) x", "surrogate_pairs": "lone surrogate", "too_many_values": "values, limit"}


def test_the_valid_padded_spec_is_accepted_at_exactly_the_maximum_spec_size():
    spec = costly_txs.valid_max_spec()
    assert len(spec) == costly_txs.SPEC_BYTES
    assert validate_spec(spec, costly_txs.TERMS["rounds"]).rounds == costly_txs.TERMS["rounds"]


@pytest.mark.parametrize("kind", sorted(costly_txs.COSTLY_SPECS))
def test_each_costly_transaction_is_of_about_the_maximum_size_and_refused_only_at_its_last_spec(kind):
    assert set(REFUSAL) == set(costly_txs.COSTLY_SPECS)
    app = fuzz_app()
    messages = costly_txs.costly_messages(kind)
    tx = Signers().sign(KEYS[0], messages, fee=100_000, memo=costly_txs.MEMO)
    assert len(tx) <= costly_txs.TX_BYTES and (kind == "too_many_values" or len(tx) > 0.99 * costly_txs.TX_BYTES)
    check = app.check_tx(abci.RequestCheckTx(tx=tx))
    assert (check.code, check.codespace) == (InvalidSpec.code, "market") and REFUSAL[kind] in check.log
    # The valid specs before it pass on their own: the refusal came after all of them were read.
    valid_only = Signers().sign(KEYS[0], messages[:-1], fee=100_000, memo=costly_txs.MEMO)
    assert app.check_tx(abci.RequestCheckTx(tx=valid_only)).code == 0
