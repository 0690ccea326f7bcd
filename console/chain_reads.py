"""What the console's pages show, read from the node through the wallet's RPC client and typed views.

Every function takes the asynchronous RPC client and answers plain JSON for the front end: the views' own
`to_answer` documents, and the RPC's typed answers' `to_json`, so the console says exactly what the CLI's
`-o json` says. Blocks are immutable once committed, so their headers are kept in a `ReadCache`.

What comes from the store is proven as the wallet proves it (`trolly.wallet.proven_views`): the validator listing
(complete), each validator (its detail record and its signing info), a page of the task listing, a task's
overview and each page of its rounds, an account and a worker carry `proof` (`proved at height H`, the app hash and
block it was checked against), and a task id searched for is found by a proven read; a proof that does not hold
fails the read with the wallet's ProofInvalid, shown as an error (502). Not proven: blocks and transactions
(CometBFT's own; tests/project/test_display_reads_proven.py lists every unproven read shown, and why).
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime

from trolly.wallet.errors import ProofInvalid, QueryFailed, WalletError
from trolly.wallet.proofs import prove_answer
from trolly.wallet.proven_views import (prove_signing_info, prove_task, prove_task_page, prove_validator,
                                        prove_validators, prove_worker)
from trolly.wallet.rpc import AsyncRpcClient, BlockHeader, TxResult, hash_hex
from trolly.wallet.txbuilder import describe_tx

RECENT_BLOCKS = 10
"""Blocks the network page lists (each one RPC call the first time it is shown, then cached)."""
RECENT_TXS = 15
"""Users' transactions the network page lists, newest first."""
USERS_TXS = "tx.signer EXISTS"
"""The `tx_search` query of users' transactions: every transaction a user signed and paid for carries the chain's
`tx` event with its signer (`chain/app.py`), and the engine's own per-block seed transaction does not, so they
are listed whatever number of blocks, each holding a seed transaction, came since."""

_TASK_ID = re.compile(r"^#?\d{1,18}$")
_TX_HASH = re.compile(r"^(0x)?[0-9a-fA-F]{64}$")


class ReadCache:
    """Block headers by height: committed blocks never change. `clear` is the console's "refresh" action."""

    def __init__(self) -> None:
        self.blocks: dict[int, BlockHeader] = {}

    def clear(self) -> int:
        cleared = len(self.blocks)
        self.blocks.clear()
        return cleared


async def network_overview(client: AsyncRpcClient, cache: ReadCache) -> dict:
    """Height, block time, validators (stake, power, commission, delegators, missed blocks, jail state), the recent
    blocks, and users' recent transactions."""
    status = await client.status()
    height = status.latest_block_height
    listed, listing = await prove_validators(client)
    rows = await asyncio.gather(*(_validator_row(client, v.operator) for v in listed))  # one block's wait, not N
    blocks = []
    for block_height in range(height, max(0, height - RECENT_BLOCKS), -1):
        if block_height not in cache.blocks:
            cache.blocks[block_height] = await client.block(block_height)
        blocks.append(cache.blocks[block_height])
    txs, _ = await client.tx_search(USERS_TXS, per_page=RECENT_TXS, order_by="desc")
    return {
        "status": status.to_json(),
        "block_time_seconds": _seconds_between(blocks),
        "validators": list(rows),
        "validators_proof": listing.proof_json(),
        "blocks": [_block_json(header) for header in blocks],
        "txs": [_tx_json(tx) for tx in txs],
    }


async def tasks_page(client: AsyncRpcClient, after: int) -> dict:
    """One page of every task (the chain's page size), and the id the next page starts after, proven."""
    page, proven = await prove_task_page(client, after)
    return {**page.to_answer(), "proof": proven.proof_json()}


async def task_detail(client: AsyncRpcClient, task_id: int) -> dict:
    """The whole task: terms, members with pay and slashes, every round's commitments, segments, committees and
    votes, the overview and each round proven (`proven_views.prove_task`: `proof` beside each)."""
    return (await prove_task(client, task_id)).to_answer()


async def search(client: AsyncRpcClient, text: str) -> dict:
    """What `text` names: a task id, a transaction hash or an address. `kind` says which; "none" when nothing."""
    text = text.strip()
    if _TASK_ID.match(text):
        task_id = int(text.lstrip("#"))
        try:
            await prove_answer(client, f"/market/task/{task_id}")  # found: the task page proves the rest
        except QueryFailed:
            return {"kind": "none", "query": text, "reason": f"no task {task_id}"}
        return {"kind": "task", "query": text, "task_id": task_id}
    if _TX_HASH.match(text):
        found = await client.find_tx(hash_hex(text))
        if found is None:
            return {"kind": "none", "query": text, "reason": "no transaction with this hash in a block"}
        return {"kind": "tx", "query": text, "tx": _tx_json(found)}
    try:
        account = await prove_answer(client, f"/account/{text}")
    except ProofInvalid:
        raise  # a node whose answer does not hold is an error, never "not found"
    except WalletError as error:  # an invalid address included
        return {"kind": "none", "query": text, "reason": str(error) or "not a task id, transaction hash or address"}
    result = {"kind": "address", "query": text, "account": {**account.answer, "proof": account.proof_json()},
              "worker": None, "validator": None}
    try:
        worker, proven = await prove_worker(client, text)
        result["worker"] = {**worker.to_answer(), "proof": proven.proof_json()}
    except QueryFailed:
        pass  # not a worker: the account alone
    listed, _ = await prove_validators(client)
    if any(v.operator == text for v in listed):
        detail, proven = await prove_validator(client, text)
        result["validator"] = {**detail.to_answer(), "proof": proven.proof_json()}
    return result


async def _validator_row(client: AsyncRpcClient, operator: str) -> dict:
    """A validator as the network page lists it: its proven `/validator/<operator>` answer (stake, power,
    commission, delegator count and self-bond) and its proven liveness
    (`/signing_info/<operator>`: missed blocks of its window, jailed until, tombstoned), as `trolly-wallet query
    validator` and `query signing-info` prove them. `proof` is the validator record's, `liveness_proof` the
    signing info's."""
    detail, proven = await prove_validator(client, operator)
    liveness, liveness_proof = await prove_signing_info(client, operator)
    return {**detail.to_answer(), "missed_blocks": liveness.missed_blocks_counter,
            "max_missed_blocks": liveness.max_missed_blocks, "signed_blocks_window": liveness.signed_blocks_window,
            "jailed_until": liveness.jailed_until, "tombstoned": liveness.tombstoned, "proof": proven.proof_json(),
            "liveness_proof": liveness_proof.proof_json()}


def _block_json(header: BlockHeader) -> dict:
    return {"height": header.height, "time": header.time, "hash": header.block_hash, "txs": header.num_txs,
            "app_hash": header.app_hash.hex().upper()}


def _tx_json(tx: TxResult) -> dict:
    answer = tx.to_json()
    try:
        answer["body"] = describe_tx(tx.tx) if tx.tx else None
    except WalletError:
        answer["body"] = None  # the engine's own seed transactions are not wallet transactions
    return answer


def _seconds_between(blocks: list[BlockHeader]) -> float | None:
    """Mean seconds between the listed blocks (newest first), from their header times."""
    times = [_parse_time(header.time) for header in blocks]
    times = [t for t in times if t is not None]
    if len(times) < 2:
        return None
    span = (times[0] - times[-1]).total_seconds()
    return round(span / (len(times) - 1), 3) if span >= 0 else None


def _parse_time(text: str) -> datetime | None:
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", text or "")
    if not match:
        return None
    fraction = (match.group(2) or ".0")[:7]  # CometBFT writes nanoseconds; datetime takes microseconds
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(match.group(1) + fraction + zone)

