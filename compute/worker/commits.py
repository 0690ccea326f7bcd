"""Sending a round's commitment exactly once, whatever happens to the process or the network.

    sign      the `MsgCommitRound` is signed with the next nonce and the bytes are SAVED before they are sent
    send      the saved bytes are broadcast; once in a block, `committed` is saved
    resend    after a restart (or a refusal, or a timeout) the saved bytes are sent again, unchanged

Re-sending identical bytes can never commit twice: the same nonce cannot be used twice, and the chain takes
one commitment per member and round anyway. A new signature (same content, a fresh nonce) is made only when
the saved transaction can provably never be included: it is not in any block, the commitment is not on chain,
and the account's nonce has moved past the saved one (another transaction took it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from trolly.chain.errors import InvalidNonce
from trolly.chain.proto.market_pb2 import MsgCommitRound
from trolly.chain.tx import decode_tx
from trolly.wallet.errors import InclusionTimeout, TxRejected, WalletError

from . import plan
from .progress import WorkerState

log = logging.getLogger("trolly.worker")


def decode_commit(raw: bytes) -> MsgCommitRound:
    """The MsgCommitRound inside a signed commitment transaction."""
    return MsgCommitRound.FromString(decode_tx(raw).body.messages[0].value)


class Committer:
    """Commits rounds for one worker through `market` (a `MarketClient`), recording progress in `state`."""

    def __init__(self, market, state: WorkerState, sleep: Callable[[float], Awaitable[None]]) -> None:
        self.market = market
        self.state = state
        self.sleep = sleep

    def pending(self, task_id: int, round_index: int) -> bool:
        """A commitment for this round was signed (and maybe sent): only `resend` may follow."""
        return bool(self.state.task(task_id).round(round_index).commit_tx)

    async def commit(self, task_id: int, round_index: int, message: MsgCommitRound) -> None:
        raw = await self.market.sign(message)
        round_progress = self.state.task(task_id).round(round_index)
        with self.state.lock:
            round_progress.commit_tx = raw.hex()
            self.state.save()  # saved BEFORE it leaves the process: a restart re-sends these exact bytes
        await self.resend(task_id, round_index)

    async def resend(self, task_id: int, round_index: int) -> None:
        round_progress = self.state.task(task_id).round(round_index)
        raw = bytes.fromhex(round_progress.commit_tx)
        try:
            outcome = await self.market.broadcast(raw)
            log.info("task %d round %d: committed in block %d", task_id, round_index, outcome.included.height)
        except (TxRejected, InclusionTimeout) as error:
            if not await self._on_chain_after_all(task_id, round_index, raw, error):
                return
        with self.state.lock:
            round_progress.committed = True
            self.state.save()

    async def _on_chain_after_all(self, task_id: int, round_index: int, raw: bytes, error: WalletError) -> bool:
        """After a refused or slow broadcast: True if the commitment is on chain after all."""
        included = await self.market.find_tx(raw)
        view = await self.market.task(task_id)
        if plan.committed_on_chain(view, round_index, self.market.address):
            return True
        if included is not None:
            # Refused in a block (e.g. the round closed first): the chain drops this worker from the task,
            # which the next look at the chain sees. Nothing to re-send.
            log.error("task %d round %d: the commitment was refused in block %d: %s", task_id, round_index,
                      included.height, included.log)
            await self.sleep(1.0)
            return False
        nonce = decode_tx(raw).body.nonce
        if isinstance(error, TxRejected) and error.code == InvalidNonce.code and await self.market.nonce() > nonce:
            log.warning("task %d round %d: the saved commitment's nonce %d was used by another transaction; "
                        "signing it again", task_id, round_index, nonce)
            fresh = await self.market.sign(decode_commit(raw))
            with self.state.lock:
                self.state.task(task_id).round(round_index).commit_tx = fresh.hex()
                self.state.save()
            return False  # the next pass of the loop sends the fresh bytes
        log.warning("task %d round %d: commitment not included yet (%s); will check again", task_id, round_index, error)
        await self.sleep(1.0)
        return False
