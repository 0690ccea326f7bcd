"""A fake CometBFT node for the wallet's tests: the real chain state machine behind a JSON-RPC server.

`FakeNode` runs `trolly.chain.app` (genesis, CheckTx against a mempool overlay, blocks) over a `MemoryKV`, keeps
the app hash with the node tree of `trolly.chain.sparse_merkle_nodes` (ICS23 proofs from it), and answers the JSON-RPC calls the wallet makes
with CometBFT v0.38's shapes (int64 as strings, bytes base64, hashes upper-case hex). Blocks are produced every
`block_interval` seconds on the server's own event loop, in a background thread, so synchronous CLI tests can
talk to it over 127.0.0.1. `pause_blocks()` stops block production (to test inclusion timeouts), and
`tamper_app_hash` makes headers lie and `tamper_answer` rewrites query answers (to test proof checking).

Used only by tests; the end-to-end tests talk to a real `trolly-node dev` instead.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
import time
from typing import Any, Callable

from aiohttp import web
from chain_helpers import ONE_BLOCK_WINDOWS

from trolly.chain.accounts import get_account
from trolly.chain.app import apply_block, check_tx, init_chain, query
from trolly.chain.block import BlockEnv
from trolly.chain.codec import canonical_json
from trolly.chain.crypto import encode_address
from trolly.chain.errors import ChainError
from trolly.chain.ics23_proofs import prove_key
from trolly.chain.sparse_merkle import key_hash, value_hash
from trolly.chain.sparse_merkle_nodes import DictNodeSource, root_hash, update_tree
from trolly.chain.query_reads import RecordingReader
from trolly.chain.state import MemoryKV, State
from trolly.chain.tx import tx_hash

CHAIN_ID = "trolly-fake"


def _event_json(event) -> dict:
    return {"type": event.type, "attributes": [{"key": k, "value": v, "index": True} for k, v in event.attributes]}


class FakeNode:
    def __init__(self, app_state: dict, block_interval: float = 0.05) -> None:
        self.block_interval = block_interval
        self.store = MemoryKV()
        self.tree = DictNodeSource()
        genesis = State(self.store)
        self.genesis_validators = init_chain(genesis, BlockEnv(CHAIN_ID, 0, 0), app_state)
        self._commit(genesis.changes())
        self.height = 0
        self.app_hashes = {0: root_hash(self.tree)}  # app hash after block h
        self.headers: dict[int, dict] = {}
        self.tx_index: dict[str, dict] = {}
        self.mempool: list[bytes] = []
        self.check_state = State(self.store)
        self.producing = True
        self.tamper_app_hash = False
        self.tamper_answer: Callable[[str, Any], Any] | None = None
        """(path, answer) -> the answer to send instead, a lying node's; None answers the truth."""
        self.tamper_proofs: Callable[[str, list[dict]], list[dict]] | None = None
        """(path, proof ops) -> the proof ops to send instead (one dropped, another key's); None sends the truth."""
        self.skip_check_tx = False  # accept into the mempool unchecked, so a failure shows up only in the block
        self.broadcasts = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = False

    # ---- chain ----------------------------------------------------------------------------------------------

    def _commit(self, changes: dict[bytes, bytes | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self.store.items.pop(key, None)
            else:
                self.store.items[key] = value
        self.tree.apply(update_tree(self.tree, [(key_hash(k), None if v is None else value_hash(v))
                                                for k, v in changes.items()]))

    def produce_block(self) -> None:
        height = self.height + 1
        txs, self.mempool = self.mempool, []
        env = BlockEnv(CHAIN_ID, height, time.time_ns(), block_hash=hashlib.sha256(b"block%d" % height).digest())
        state = State(self.store)
        output = apply_block(state, env, txs)
        header_app_hash = self.app_hashes[height - 1]
        self._commit(state.changes())
        self.height = height
        self.app_hashes[height] = root_hash(self.tree)
        self.headers[height] = {"height": height, "app_hash": header_app_hash, "txs": txs}
        for index, (raw, result) in enumerate(zip(txs, output.tx_results)):
            self.tx_index[tx_hash(raw).hex().upper()] = {
                "hash": tx_hash(raw).hex().upper(),
                "height": str(height),
                "index": index,
                "tx_result": {
                    "code": result.code,
                    "data": None,
                    "log": result.log,
                    "info": "",
                    "gas_wanted": "0",
                    "gas_used": "0",
                    "events": [_event_json(e) for e in result.events],
                    "codespace": result.codespace,
                },
                "tx": base64.b64encode(raw).decode(),
            }
        self.check_state = State(self.store)

    def account(self, address: bytes):
        return get_account(State(self.store), address)

    # ---- JSON-RPC -------------------------------------------------------------------------------------------

    def _status(self, params: dict) -> dict:
        return {
            "node_info": {"id": "fa" * 20, "network": CHAIN_ID, "version": "0.38.17", "moniker": "fake"},
            "sync_info": {
                "latest_block_hash": hashlib.sha256(b"block%d" % self.height).hexdigest().upper(),
                "latest_app_hash": self.app_hashes[self.height].hex().upper(),
                "latest_block_height": str(self.height),
                "latest_block_time": "2026-01-01T00:00:00Z",
                "catching_up": False,
            },
            "validator_info": {},
        }

    def _abci_query(self, params: dict) -> dict:
        """As the app answers: with `prove`, one proof per key the answer read (`trolly.chain.query_reads`)."""
        path = params["path"]
        recorder = RecordingReader(self.store)
        response: dict[str, Any] = {"code": 0, "log": "", "info": "", "index": "0", "key": None, "value": None,
                                    "proofOps": None, "height": str(self.height), "codespace": ""}
        try:
            result = query(State(recorder), path, bytes.fromhex(params.get("data") or ""))
        except ChainError as error:
            response.update(code=error.code, codespace=error.codespace, log=error.log)
            return {"response": response}
        value = result.value if self.tamper_answer is None else self.tamper_answer(path, result.value)
        response["value"] = base64.b64encode(canonical_json(value)).decode()
        reads = recorder.reads()
        if params.get("prove") and not reads.unindexed:
            ops = [self.proof_op(key) for key in reads.keys]
            response["proofOps"] = {"ops": ops if self.tamper_proofs is None else self.tamper_proofs(path, ops)}
        return {"response": response}

    def proof_op(self, key: bytes) -> dict:
        """The ABCI ProofOp (JSON) of `key` in the committed state."""
        proof_type, proof = prove_key(self.tree, key, self.store.items.get(key))
        return {"type": proof_type, "key": base64.b64encode(key).decode(), "data": base64.b64encode(proof).decode()}

    def _broadcast_tx_sync(self, params: dict) -> dict:
        raw = base64.b64decode(params["tx"])
        self.broadcasts += 1
        if self.skip_check_tx:
            self.mempool.append(raw)
            return {"code": 0, "data": "", "log": "", "codespace": "", "hash": tx_hash(raw).hex().upper()}
        result = check_tx(self.check_state, BlockEnv(CHAIN_ID, self.height + 1, time.time_ns()), raw)
        if result.code == 0:
            self.mempool.append(raw)
        return {"code": result.code, "data": "", "log": result.log, "codespace": result.codespace,
                "hash": tx_hash(raw).hex().upper()}

    def _tx(self, params: dict) -> dict:
        key = base64.b64decode(params["hash"]).hex().upper()
        if key not in self.tx_index:
            raise LookupError(f"tx ({key}) not found")
        return self.tx_index[key]

    def _tx_search(self, params: dict) -> dict:
        """CometBFT's `tx_search` for the one query form the worker's earnings ask: `tx.signer='<address>'`, by
        the chain's `tx` event, oldest first, one page."""
        query = params["query"]
        if not (query.startswith("tx.signer='") and query.endswith("'")):
            raise LookupError(f"the fake node answers only tx.signer='...' searches, not {query!r}")
        signer = query[len("tx.signer='"):-1]
        found = [entry for entry in self.tx_index.values()
                 if any(event["type"] == "tx" and {"key": "signer", "value": signer} in
                        [{"key": a["key"], "value": a["value"]} for a in event["attributes"]]
                        for event in entry["tx_result"]["events"])]
        found.sort(key=lambda entry: (int(entry["height"]), entry["index"]))
        return {"txs": found, "total_count": str(len(found))}

    def _block(self, params: dict) -> dict:
        height = int(params.get("height") or self.height)
        if height not in self.headers:
            raise LookupError(f"height {height} must be less than or equal to the current blockchain height {self.height}")
        header = self.headers[height]
        app_hash = header["app_hash"]
        if self.tamper_app_hash:
            app_hash = hashlib.sha256(app_hash).digest()
        return {
            "block_id": {"hash": hashlib.sha256(b"block%d" % height).hexdigest().upper()},
            "block": {
                "header": {"chain_id": CHAIN_ID, "height": str(height), "time": "2026-01-01T00:00:00Z",
                           "app_hash": app_hash.hex().upper(), "last_block_id": {"hash": ""}},
                "data": {"txs": [base64.b64encode(t).decode() for t in header["txs"]]},
            },
        }

    def _validators(self, params: dict) -> dict:
        rows = query(State(self.store), "/validators").value
        validators = [{"address": v["consensus_address"], "pub_key": {"type": "tendermint/PubKeyEd25519",
                       "value": v["consensus_pubkey"]}, "voting_power": str(v["power"]), "proposer_priority": "0"}
                      for v in rows if v["power"] > 0]
        return {"block_height": str(self.height), "validators": validators, "count": str(len(validators)),
                "total": str(len(validators))}

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        handlers = {"status": self._status, "abci_query": self._abci_query, "broadcast_tx_sync": self._broadcast_tx_sync,
                    "tx": self._tx, "block": self._block, "validators": self._validators,
                    "tx_search": self._tx_search}
        handler = handlers.get(body.get("method"))
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": body.get("id")}
        if handler is None:
            answer["error"] = {"code": -32601, "message": "Method not found", "data": ""}
        else:
            try:
                answer["result"] = handler(body.get("params") or {})
            except LookupError as exc:
                answer["error"] = {"code": -32603, "message": "Internal error", "data": str(exc).strip("'\"")}
        return web.json_response(answer)

    # ---- lifecycle ------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeNode":
        self.produce_block()  # block 1 exists before the first client call, as on a running chain
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake node did not start")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        while not self._stopped:
            await asyncio.sleep(self.block_interval)
            if self.producing:
                self.produce_block()
        await runner.cleanup()

    def stop(self) -> None:
        self._stopped = True
        if self._thread is not None:
            self._thread.join(10)

    def wait_blocks(self, count: int = 2) -> None:
        target = self.height + count
        deadline = time.monotonic() + 10
        while self.height < target and time.monotonic() < deadline:
            time.sleep(0.01)


# ---- genesis and fixtures ------------------------------------------------------------------------------------

import pytest  # noqa: E402  (fixtures below are imported by the wallet test modules)

from trolly.chain.hd import dev_key  # noqa: E402

DEV_GENESIS_BALANCE = 1_000_000 * 10**6
"""utrl of the funded dev account in the fake node's genesis (1,000,000 TRL)."""
DEV_STAKE = 10 * 10**6
"""The dev validator's genesis stake (power 10), taken from that balance."""
DEV_BALANCE = DEV_GENESIS_BALANCE - DEV_STAKE
"""The dev account's spendable balance right after genesis."""


def dev_app_state(params: dict | None = None) -> dict:
    """Genesis: dev_key(0) funded and operating the one validator (its consensus key is dev_key(9)'s). Free
    transactions unless `params` say otherwise, so that tests can reason about exact balances; unbonding in 4
    blocks, which genesis accepts with market windows of one block (no fake-node test verifies a round)."""
    operator, consensus = dev_key(0), dev_key(9)
    return {
        "params": params or {"staking": {"unbonding_blocks": 4}, "market": dict(ONE_BLOCK_WINDOWS),
                             "auth": {"min_fee": 0, "fee_per_byte": 0}},
        "accounts": [{"address": encode_address(operator.address), "balance": str(DEV_GENESIS_BALANCE)}],
        "validators": [{"operator": encode_address(operator.address),
                        "pub_key": base64.b64encode(consensus.pubkey).decode(),
                        "stake": str(DEV_STAKE), "moniker": "dev"}],
    }


@pytest.fixture
def fake_node():
    node = FakeNode(dev_app_state()).start()
    try:
        yield node
    finally:
        node.stop()


def account_proof_holds(items: dict[bytes, bytes], root: bytes, address: str, balance: int, nonce: int,
                        pub_key: bytes | None = None) -> bool:
    """Whether the wallet accepts an answer showing (balance, nonce, pub_key) for `address`, sent with the proofs
    of what `/account` reads from a node holding `items`, against `root`: the proofs and the answer are checked."""
    from trolly.wallet.errors import ProofInvalid
    from trolly.wallet.proofs import check_answer, proven_values
    from trolly.wallet.rpc_types import ProofOp

    source = DictNodeSource()
    source.apply(update_tree(source, [(key_hash(k), value_hash(v)) for k, v in items.items()]))
    path = f"/account/{address}"
    recorder = RecordingReader(MemoryKV(items))
    query(State(recorder), path)
    ops = []
    for key in recorder.reads().keys:
        proof_type, proof = prove_key(source, key, items.get(key))
        ops.append(ProofOp(proof_type, key, proof))
    answer = {"address": address, "balance": balance, "nonce": nonce,
              "pub_key": base64.b64encode(pub_key).decode() if pub_key else None}
    try:
        check_answer(path, answer, proven_values(root, ops))
    except ProofInvalid:
        return False
    return True
