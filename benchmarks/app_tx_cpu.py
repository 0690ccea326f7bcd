"""The app's CPU per transaction, as one validator of a CometBFT network spends it: the ABCI calls in process.

    python -m benchmarks.app_tx_cpu [--txs N] [--block-size N] [--checker on|off] [--gc node|default]

Why: on a shared 2-core machine the network benchmark's rates swing with the load, but the CPU time the app
spends per transaction does not; this is the figure to compare a change against.

What runs: a `TrollyApplication` over a real LevelDB store, genesis funding one account per transaction
(each a signed 1 utrl `MsgSend` paying the default minimum fee, as `benchmarks.network_throughput` sends).
Each request is a serialized `Request` frame, decoded and dispatched by the ABCI server's own `dispatch`, and
its response serialized, as on the socket (the socket's system calls are not counted). Per block of
`--block-size` transactions, in the order one validator sees them under a steady load:

- CheckTx NEW of the next block's transactions (they arrive while the current block is decided);
- PrepareProposal of the block (every validator is the proposer a share of the heights: weighted 1/4, the
  share of each of 4 equal validators), ProcessProposal, FinalizeBlock, Commit;
- CheckTx RECHECK of what is left in the mempool (the next block's transactions), as CometBFT does after Commit.

The figure per phase is CPU seconds (`time.process_time`, this process only) divided by the transactions the
phase handled; `per_tx_us` is one NEW, one RECHECK, a quarter of a PrepareProposal, one ProcessProposal and
one FinalizeBlock+Commit per transaction. Every transaction must succeed (the run fails if one does not).
The garbage collector is tuned as `trolly-node start` tunes the app's process (`--gc default` leaves Python's
own settings, to see what the tuning saves).
The last line is JSON: `{"per_tx_us": N, "phases_us": {...}, "txs": N, "block_size": N, "app_hash": "..."}`.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import tempfile
import time

from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.gc_tuning import tune_garbage_collection
from trolly.abci_app.home_genesis import GenesisValidator, build_app_state
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.server import AbciServer
from trolly.abci_app.signature_checker import SignatureChecker
from trolly.abci_app.store import Store
from trolly.chain.checked_txs import CheckedTxs
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.params import AuthParams
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.tx import build_tx

CHAIN_ID = "trolly-app-cpu"
GENESIS_SECONDS = 1_700_000_000
PROPOSER_SHARE = 0.25
"""The share of heights a validator proposes in a network of 4 equal validators (its PrepareProposal)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sign_transfers(count: int) -> tuple[list[bytes], dict[str, int], PrivateKey]:
    """`count` transfers, each from its own account at nonce 0, and the genesis balances they need."""
    keys = [PrivateKey(hashlib.sha256(b"trolly/app-cpu/" + i.to_bytes(4, "big")).digest()) for i in range(count)]
    recipient = PrivateKey(b"\x07" * 32).address
    probe = build_tx(keys[0], CHAIN_ID, 0, 10**9, [MsgSend(to=recipient, amount=1)])
    fee = AuthParams().minimum_fee(len(probe) + 8)
    txs = [build_tx(key, CHAIN_ID, 0, fee, [MsgSend(to=recipient, amount=1)]) for key in keys]
    return txs, {encode_address(key.address): fee + 1 for key in keys}, PrivateKey(b"\x09" * 32)


class Driver:
    """Plays one validator's CometBFT against the app: frames in, `dispatch`, frames out."""

    def __init__(self, app: TrollyApplication) -> None:
        self.server = AbciServer(app, "tcp://127.0.0.1:0")
        self.cpu: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def call(self, phase: str, request: abci.Request, handled: int = 1) -> abci.Response:
        frame = request.SerializeToString()
        started = time.process_time()
        decoded = abci.Request.FromString(frame)
        case = decoded.WhichOneof("value")
        response = self.server.dispatch("bench", case, decoded)
        response.SerializeToString()
        self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - started
        self.counts[phase] = self.counts.get(phase, 0) + handled
        return response


def check_all(driver: Driver, txs: list[bytes], kind: int, phase: str) -> None:
    for tx in txs:
        response = driver.call(phase, abci.Request(check_tx=abci.RequestCheckTx(tx=tx, type=kind))).check_tx
        if response.code != 0:
            raise SystemExit(f"{phase} refused a transaction: {response.log}")


def run_block(driver: Driver, height: int, txs: list[bytes], proposer: bytes) -> bytes:
    when = {"seconds": GENESIS_SECONDS + height}
    prepared = driver.call("prepare_proposal", abci.Request(prepare_proposal=abci.RequestPrepareProposal(
        txs=txs, max_tx_bytes=22020096, height=height, time=when, proposer_address=proposer)), len(txs))
    if list(prepared.prepare_proposal.txs) != txs:
        raise SystemExit(f"PrepareProposal at height {height} dropped transactions")
    processed = driver.call("process_proposal", abci.Request(process_proposal=abci.RequestProcessProposal(
        txs=txs, height=height, time=when, proposer_address=proposer, hash=height.to_bytes(32, "big"))), len(txs))
    if processed.process_proposal.status != abci.ResponseProcessProposal.ACCEPT:
        raise SystemExit(f"ProcessProposal rejected height {height}")
    finalized = driver.call("finalize_block", abci.Request(finalize_block=abci.RequestFinalizeBlock(
        txs=txs, height=height, time=when, proposer_address=proposer, hash=height.to_bytes(32, "big"))), len(txs))
    failed = [result.log for result in finalized.finalize_block.tx_results if result.code != 0]
    if failed:
        raise SystemExit(f"{len(failed)} transactions failed at height {height}: {failed[0]}")
    driver.call("commit", abci.Request(commit=abci.RequestCommit()), len(txs))
    return finalized.finalize_block.app_hash


def measure(count: int, block_size: int, checker_on: bool, node_gc: bool = True) -> dict:
    txs, accounts, operator = sign_transfers(count)
    validator_key = PrivateKey(b"\x0b" * 32)
    validators = [GenesisValidator(validator_key.pubkey, encode_address(operator.address), 10_000_000, "bench")]
    accounts[encode_address(operator.address)] = 10_000_000
    app_state = build_app_state(accounts, validators)
    blocks = [txs[start:start + block_size] for start in range(0, count, block_size)]
    with tempfile.TemporaryDirectory(prefix="trolly-app-cpu-") as directory:
        store = Store(f"{directory}/app.db")
        checker = SignatureChecker(enabled=checker_on)
        try:
            driver = Driver(TrollyApplication(store, CHAIN_ID, checks=CheckedTxs(), signature_checker=checker))
            driver.call("init_chain", abci.Request(init_chain=abci.RequestInitChain(
                chain_id=CHAIN_ID, app_state_bytes=json.dumps(app_state).encode(), initial_height=1,
                time={"seconds": GENESIS_SECONDS})))
            if checker_on:
                checker.start(wait=60)
            if node_gc:
                tune_garbage_collection()  # as `trolly-node start` runs the app
            else:
                gc.collect()
            check_all(driver, blocks[0], abci.NEW, "check_tx_new")
            app_hash = b""
            for index, block in enumerate(blocks):
                following = blocks[index + 1] if index + 1 < len(blocks) else []
                check_all(driver, following, abci.NEW, "check_tx_new")
                app_hash = run_block(driver, index + 1, block, validator_key.address)
                check_all(driver, following, abci.RECHECK, "check_tx_recheck")
        finally:
            checker.close()
            store.close()
    per_phase = {phase: 1e6 * driver.cpu[phase] / driver.counts[phase] for phase in driver.cpu if phase != "init_chain"}
    per_tx = (per_phase["check_tx_new"] + per_phase["check_tx_recheck"]
              + PROPOSER_SHARE * per_phase["prepare_proposal"] + per_phase["process_proposal"]
              + per_phase["finalize_block"] + per_phase["commit"])
    return {"per_tx_us": round(per_tx, 1), "phases_us": {k: round(v, 1) for k, v in per_phase.items()},
            "txs": count, "block_size": block_size, "checker": "on" if checker_on else "off",
            "gc": "node" if node_gc else "default", "app_hash": app_hash.hex()}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.app_tx_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--txs", type=int, default=6000, help="transactions in all (default 6000)")
    parser.add_argument("--block-size", type=int, default=1000, help="transactions per block (default 1000)")
    parser.add_argument("--checker", choices=("on", "off"), default="off",
                        help="the signature checker process (its CPU is not counted; default off)")
    parser.add_argument("--gc", choices=("node", "default"), default="node",
                        help="the garbage collector tuned as trolly-node start tunes it (default), or Python's default")
    arguments = parser.parse_args()
    if arguments.txs < 1 or arguments.block_size < 1:
        parser.error("--txs and --block-size must be at least 1")
    result = measure(arguments.txs, arguments.block_size, arguments.checker == "on", arguments.gc == "node")
    for phase, micros in result["phases_us"].items():
        log(f"{phase:>18}: {micros:8.1f} us CPU per tx")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
