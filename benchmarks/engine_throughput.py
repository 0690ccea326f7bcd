"""Solo engine throughput: signed `send` transactions end to end through CometBFT-style JSON-RPC.

    python -m benchmarks.engine_throughput [--quick] [--txs N]

Three processes, as in `trolly-node dev`: the app (`trolly-node start`), the solo engine (`trolly-node engine`) and this client. Genesis funds one account per transaction, and every transaction (a
1 utrl `MsgSend`, nonce 0, from its own account) is signed before the clock starts. Measured:

(a) end to end: 32 concurrent `broadcast_tx_sync` POSTs (CheckTx through the mempool connection), the
    engine's blocks every 200 ms (PrepareProposal, ProcessProposal, FinalizeBlock, the block store's synced write,
    Commit, re-check), until every transaction is committed (the engine's blocks must carry exactly N);
(b) the baseline, measured in the same run: the same transactions driven straight over the ABCI socket
    into a fresh app, in blocks of the same sizes the engine made, with the least work CometBFT asks of an
    app per transaction (one CheckTx, pipelined, then FinalizeBlock and Commit; no RPC, no re-check, no
    proposal calls): the ceiling the engine's overhead is judged against.
The last line is JSON: `{"tx_per_s_end_to_end": x, "tx_per_s_abci_direct": y, "overhead_ratio": y/x,
"blocks": B, "txs": N}`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time

import aiohttp

from benchmarks._network_nets import free_ports
from trolly.abci_app import home as homelib
from trolly.abci_app.engine.abci_client import AbciClient
from trolly.abci_app.engine.chainstate import init_chain_request, timestamp
from trolly.abci_app.proto.tendermint.abci import types_pb2
from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.params import AuthParams
from trolly.wallet.txbuilder import TxPlan

CHAIN_ID = "bench-engine"
AUTH = AuthParams()
"""The default chain's fee rule, which the genesis keeps: every transaction pays its minimum fee."""
CONCURRENCY = 32
BLOCK_TIME = "200ms"


def make_genesis(count: int, validator: homelib.ValidatorKey) -> tuple[dict, list[bytes]]:
    senders = [PrivateKey(i.to_bytes(32, "big")) for i in range(1, count + 1)]
    recipient = PrivateKey(b"\xff" * 32).address
    operator = encode_address(validator.address)
    plans = [TxPlan(CHAIN_ID, 0, 0, (MsgSend(to=recipient, amount=1),)).with_minimum_fee(AUTH.min_fee, AUTH.fee_per_byte)
             for _ in senders]  # the default chain's fee for a send: every sender pays it once
    accounts = {encode_address(key.address): plan.spend for key, plan in zip(senders, plans)}
    accounts[operator] = homelib.DEFAULT_VALIDATOR_STAKE
    staked = homelib.GenesisValidator(validator.pubkey, operator, homelib.DEFAULT_VALIDATOR_STAKE, "bench")
    genesis = homelib.build_genesis(CHAIN_ID, homelib.build_app_state(accounts, [staked]), [staked])
    txs = [plan.sign(key) for key, plan in zip(senders, plans)]
    return genesis, txs


def spawn(*arguments: str, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trolly.abci_app.cli", *arguments], stdout=log, stderr=log)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def rpc(session: aiohttp.ClientSession, url: str, method: str, **params):
    async with session.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) as response:
        answer = await response.json()
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


async def height(session, url) -> int:
    return int((await rpc(session, url, "status"))["sync_info"]["latest_block_height"])


async def wait_ready(session, url, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await height(session, url) >= 1:
                await rpc(session, url, "abci_info")
                return
        except (aiohttp.ClientError, RuntimeError):
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the engine did not start")


async def end_to_end(url: str, txs: list[bytes]) -> tuple[float, list[int]]:
    async with aiohttp.ClientSession() as session:
        await wait_ready(session, url)
        queue = list(reversed(txs))
        first_height = await height(session, url)

        async def worker():
            while queue:
                tx = queue.pop()
                answer = await rpc(session, url, "broadcast_tx_sync", tx=base64.b64encode(tx).decode())
                if answer["code"] != 0:
                    raise RuntimeError(f"tx refused: {answer}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        while (await rpc(session, url, "num_unconfirmed_txs"))["n_txs"] != "0":
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        last = await height(session, url)
        sizes = []
        sent = {base64.b64encode(tx).decode() for tx in txs}
        for block_height in range(first_height + 1, last + 1):
            carried = (await rpc(session, url, "block", height=str(block_height)))["block"]["data"]["txs"] or []
            count = sum(1 for tx in carried if tx in sent)  # not the engine's own seed transactions
            if count:
                sizes.append(count)
        if sum(sizes) != len(txs):
            raise RuntimeError(f"the engine's blocks carry {sum(sizes)} txs, expected {len(txs)}")
        return len(txs) / elapsed, sizes


async def abci_direct(address: str, genesis: dict, txs: list[bytes], sizes: list[int], proposer: bytes) -> float:
    client = await AbciClient.connect_with_retry(address)
    try:
        await client.info(types_pb2.RequestInfo())
        await client.init_chain(init_chain_request(genesis))
        time_ns, offset, block_height = time.time_ns(), 0, 0
        started = time.perf_counter()
        for size in sizes:
            block_height += 1
            block = txs[offset:offset + size]
            offset += size
            checks = await client._connections["mempool"].call_many(
                "check_tx", [types_pb2.RequestCheckTx(tx=tx, type=types_pb2.NEW) for tx in block]
            )
            if any(check.code != 0 for check in checks):
                raise RuntimeError("a baseline CheckTx failed")
            response = await client.finalize_block(types_pb2.RequestFinalizeBlock(
                txs=block, height=block_height, time=timestamp(time_ns + block_height), proposer_address=proposer,
                hash=block_height.to_bytes(32, "big"),
            ))
            if any(result.code != 0 for result in response.tx_results):
                raise RuntimeError("a baseline tx failed")
            await client.commit()
        return len(txs) / (time.perf_counter() - started)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 transactions instead of 5,000")
    parser.add_argument("--txs", type=int, default=None)
    arguments = parser.parse_args()
    count = arguments.txs or (1000 if arguments.quick else 5000)

    with tempfile.TemporaryDirectory() as scratch:
        validator = homelib.ValidatorKey.generate()
        genesis, txs = make_genesis(count, validator)
        log = open(os.path.join(scratch, "processes.log"), "wb")

        root = os.path.join(scratch, "engine-home")
        homelib.write_home(root, genesis, validator)
        app_address, [port] = f"unix://{scratch}/engine-app.sock", free_ports(1)
        app = spawn("start", "--home", root, "--abci", app_address, log=log)
        engine = spawn("engine", "--home", root, "--proxy-app", app_address, "--rpc-laddr",
                       f"tcp://127.0.0.1:{port}", "--block-time", BLOCK_TIME, log=log)
        try:
            end_to_end_rate, sizes = asyncio.run(end_to_end(f"http://127.0.0.1:{port}", txs))
        finally:
            stop(engine)
            stop(app)

        root = os.path.join(scratch, "direct-home")
        homelib.write_home(root, genesis, validator)
        direct_address = f"unix://{scratch}/direct-app.sock"
        app = spawn("start", "--home", root, "--abci", direct_address, log=log)
        try:
            direct_rate = asyncio.run(abci_direct(direct_address, genesis, txs, sizes, validator.address))
        finally:
            stop(app)

    print(f"end to end through JSON-RPC: {end_to_end_rate:,.0f} tx/s in {len(sizes)} blocks "
          f"(largest {max(sizes)} txs); straight over ABCI: {direct_rate:,.0f} tx/s", file=sys.stderr)
    print(json.dumps({
        "tx_per_s_end_to_end": round(end_to_end_rate, 1),
        "tx_per_s_abci_direct": round(direct_rate, 1),
        "overhead_ratio": round(direct_rate / end_to_end_rate, 2),
        "blocks": len(sizes),
        "txs": count,
    }))


if __name__ == "__main__":
    main()
