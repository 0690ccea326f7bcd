"""Shared test vectors for the browser worker's chain-facing JavaScript (console/web/src/browser_worker/): Python
makes keys from fixed seeds and transactions of every message a worker sends, and the Node.js modules must give
the same addresses, signatures, transaction bytes and hashes (chain_vectors.mjs). The chain refuses any encoding
that is not the canonical one and verifies signatures over the body bytes as sent, so a tab whose bytes differed
in one field's order or one default left in would have every transaction refused."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from bw_chain_helpers import NODE, ROOT, camel_case_fields, run_node_script
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.tx import tx_hash
from trolly.wallet.txbuilder import TxPlan

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (Debian's nodejs package)")

U64_MAX = 2**64 - 1
SEEDS = [bytes(32), bytes(range(32)), hashlib.sha256(b"trolly browser worker vector").digest(), b"\xff" * 32]


def digest(tag: str) -> bytes:
    return hashlib.sha256(tag.encode()).digest()


MESSAGES = {
    "register, every field": pb.MsgRegisterWorker(
        stake=1_000_000_000, blob_url="https://worker.example/blobs",
        hardware=pb.HardwareProfile(device="wasm32", samples_per_second=1234, memory_mb=2048, threads=1)),
    "register through a relay, an empty hardware profile": pb.MsgRegisterWorker(
        stake=10_000_000, hardware=pb.HardwareProfile(), relay="http://127.0.0.1:26680"),
    "register at the largest values": pb.MsgRegisterWorker(
        stake=U64_MAX, hardware=pb.HardwareProfile(device="cuda:ü", samples_per_second=U64_MAX,
                                                   memory_mb=2**53 + 1, threads=2**32 - 1)),
    "update, clear the relay only": pb.MsgUpdateWorker(clear_relay=True),
    "update every field": pb.MsgUpdateWorker(add_stake=5, hardware=pb.HardwareProfile(device="cpu", threads=4),
                                             blob_url="http://a", relay="http://b"),
    "unregister": pb.MsgUnregisterWorker(),
    "join": pb.MsgJoinTask(task_id=7),
    "join task 0 (every field default)": pb.MsgJoinTask(task_id=0),
    "leave": pb.MsgLeaveTask(task_id=2**40 + 3),
    "commit a round": pb.MsgCommitRound(
        task_id=3, round=2, update_hash=digest("update"), samples_processed=64_000, steps=500,
        checkpoint_root=digest("root"), num_checkpoints=5, start_weights_hash=digest("start"),
        determinism_profile="wasm32/kernel-1", residual_hash=digest("residual")),
    "the final report": pb.MsgCommitRound(task_id=3, round=4, start_weights_hash=digest("final")),
    "report a bad key": pb.MsgReportBadKey(task_id=9, proof=digest("proof") + digest("proof 2")),
}


def js_message(message) -> dict:
    """How chain_vectors.mjs is told to build `message`: its kind and its set fields in camelCase (bytes as
    hex, integers beyond 2^53 as decimal text)."""
    return {"kind": message.DESCRIPTOR.name, "fields": camel_case_fields(message)}


def transaction_cases() -> list[tuple[str, dict, TxPlan, PrivateKey]]:
    cases = []
    for index, (name, message) in enumerate(MESSAGES.items()):
        seed = SEEDS[index % len(SEEDS)]
        plan = TxPlan("trolly-dev", index, 1_000 + index, (message,))
        cases.append((name, seed, plan))
    everything = tuple(MESSAGES.values())
    cases.append(("every message in one tx, a memo", SEEDS[1], TxPlan("trolly-localnet-7", 0, 0, everything, "héllo ✓")))
    cases.append(("the largest nonce and fee", SEEDS[2], TxPlan("c", U64_MAX, U64_MAX, (MESSAGES["join"],))))
    return cases


FEE_PARAMS = [(1_000, 10), (0, 0), (7, 1), (1_000_000, 1_000)]


def test_addresses_signatures_transactions_and_hashes_match_python():
    messages = [b"", b"hello", bytes(range(256)) * 4]
    key_inputs = [{"seed": seed.hex(), "message": message.hex()} for seed in SEEDS for message in messages]
    cases = transaction_cases()
    tx_inputs = [{"seed": seed.hex(), "chainId": plan.chain_id, "nonce": str(plan.nonce) if plan.nonce > 2**53 else plan.nonce,
                  "fee": str(plan.fee), "memo": plan.memo, "messages": [js_message(m) for m in plan.messages]}
                 for _, seed, plan in cases]
    fee_plans = [(seed, plan.with_fee(0), params) for _, seed, plan in cases[:4] for params in FEE_PARAMS]
    tx_inputs += [{"seed": seed.hex(), "chainId": plan.chain_id, "nonce": plan.nonce, "memo": plan.memo,
                   "messages": [js_message(m) for m in plan.messages],
                   "feeParams": {"minFee": params[0], "feePerByte": params[1]}} for seed, plan, params in fee_plans]

    answer = run_node_script("chain_vectors.mjs", {"keys": key_inputs, "transactions": tx_inputs})

    expected_keys = [{"address": encode_address(PrivateKey(seed).address), "publicKey": PrivateKey(seed).pubkey.hex(),
                      "signature": PrivateKey(seed).sign(message).hex()} for seed in SEEDS for message in messages]
    assert answer["keys"] == expected_keys
    plans = [(name, seed, plan) for name, seed, plan in cases]
    plans += [(f"minimum fee {params} of {cases[i // len(FEE_PARAMS)][0]}", seed, plan.with_minimum_fee(*params))
              for i, (seed, plan, params) in enumerate(fee_plans)]
    assert len(answer["transactions"]) == len(plans)
    for (name, seed, plan), got in zip(plans, answer["transactions"]):
        raw = plan.sign(PrivateKey(seed))
        assert got == {"tx": raw.hex(), "hash": tx_hash(raw).hex().upper(), "fee": str(plan.fee)}, name


def test_the_committed_protobuf_descriptor_is_the_proto_files():
    """tx.js encodes with the descriptor committed beside it; after a .proto file changes, it must be
    regenerated (`node console/web/scripts/proto_descriptor.mjs`), or a tab would sign the old layout."""
    done = subprocess.run([NODE, "console/web/scripts/proto_descriptor.mjs", "--print"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    committed = (ROOT / "console" / "web" / "src" / "browser_worker" / "proto_descriptor.js").read_text()
    assert done.stdout == committed, "run `node console/web/scripts/proto_descriptor.mjs` and commit the result"


BAD_FIELDS = [
    ("msgJoinTask", "-1", "task_id must be in 0..18446744073709551615, got -1"),
    ("msgJoinTask", "1.5", "must be a whole number"),
    ("msgJoinTask", "2 ** 60", "beyond a JS number's exact range"),
    ("msgJoinTask", "2n ** 64n", "must be in 0..18446744073709551615"),
    ("msgJoinTask", "undefined", "taskId is required"),
    ("msgRegisterWorker", "{stake: 5, blobURL: 'x'}", "MsgRegisterWorker has no field"),
    ("msgRegisterWorker", "{stake: 5, hardware: {threads: 2 ** 32}}", "hardware.threads must be an integer in 0..4294967295"),
    ("msgRegisterWorker", "{stake: 5, relay: 7}", "relay must be a string"),
    ("msgCommitRound", "{taskId: 1, updateHash: 'xyz'}", "update_hash must be a Uint8Array or hex text"),
    ("msgUpdateWorker", "{clearRelay: 1}", "clear_relay must be true or false"),
]


@pytest.mark.parametrize("encoder, argument, message", BAD_FIELDS, ids=[case[2] for case in BAD_FIELDS])
def test_a_field_the_chain_could_not_read_is_refused_before_signing(encoder, argument, message):
    script = ("import * as tx from './console/web/src/browser_worker/tx.js';"
              f"try {{ tx.{encoder}({argument}); console.log('encoded'); }}"
              "catch (error) { console.log(error.name + ': ' + error.message); }")
    done = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("EncodingError: ") and message in done.stdout, done.stdout


def test_amounts_beyond_two_to_the_53_in_the_chains_answers_are_read_exactly():
    """Python writes every integer as a JSON number; JSON.parse would round 2^64 - 1 to 2^64 without a word."""
    answer = json.dumps({"balance": U64_MAX, "nonce": 7, "memo": "18446744073709551615 \" 9007199254740993",
                         "list": [2**53 + 1, -(2**60), 1.5e300, 0.25]})
    script = ("import { parseExactJson } from './console/web/src/browser_worker/exact_json.js';"
              "const value = parseExactJson(process.argv[1]);"
              "console.log(JSON.stringify({value, balance: String(BigInt(value.balance) - 1n)}));")
    done = subprocess.run([NODE, "--input-type=module", "-e", script, answer], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "value": {"balance": str(U64_MAX), "nonce": 7, "memo": "18446744073709551615 \" 9007199254740993",
                  "list": [str(2**53 + 1), str(-(2**60)), 1.5e300, 0.25]},
        "balance": str(U64_MAX - 1)}


def test_the_modules_bundled_by_esbuild_sign_the_same_bytes(tmp_path):
    """The page ships the modules bundled by esbuild (protobufjs's light build, libsodium's WebAssembly inlined);
    the bundle must sign what Python signs, as the modules imported directly do."""
    esbuild = ROOT / "console" / "web" / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        pytest.skip("console/web's npm packages are not installed (make setup)")
    entry = ROOT / "console" / "web" / "src" / "browser_worker" / "tx.js"
    bundle = tmp_path / "bundle.mjs"
    built = subprocess.run([str(esbuild), str(entry), "--bundle", "--format=esm", "--target=es2020",
                            f"--outfile={bundle}", "--log-level=warning"], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    seed, plan = SEEDS[3], TxPlan("trolly-dev", 5, 1_234, (MESSAGES["commit a round"],))
    script = ("import { keyFromSeed } from './console/web/src/browser_worker/keys.js';"
              "import { fromHex, toHex } from './console/web/src/browser_worker/bytes_text.js';"
              f"const tx = await import({json.dumps(bundle.as_uri())});"
              f"const key = await keyFromSeed(fromHex('{seed.hex()}'));"
              f"const fields = {json.dumps(camel_case_fields(MESSAGES['commit a round']))};"
              "const bytes = await tx.encodeTx({chainId: 'trolly-dev', nonce: 5, fee: 1234,"
              " messages: [tx.msgCommitRound(fields)]}, key);"
              "console.log(toHex(bytes));")
    done = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == plan.sign(PrivateKey(seed)).hex()
