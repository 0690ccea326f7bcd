"""What a worker earned, task by task and round by round, read from the chain: `trolly-worker earnings`.

Providers of compute report most that what they were paid does not match what they saw; so every figure here is
the chain's own, to the unit: the pay of each round's commitment and the member's penalties and slashes with
their reason (the typed task view, `wallet.market_views`, whose numbers the market's `payout`, `dropped` and
`slash` events carry too), the collateral locked when it joined and what came back, and the fee of every
transaction the worker signed (the `tx` event of each, found by `tx.signer` in the node's transaction index),
each fee counted where its message belongs: a join to its task, a commitment to its round, anything else
(registering, updating) apart. Over a finished task, the worker's balance moved by exactly its `net`.

Every task and the worker's record are read proven (`wallet.proven_views.prove_task`, `prove_worker`: each page's
ICS23 proofs checked against the next block's app hash), so the pay, the deductions, the collateral and the stake
are the app's state, `proved at height H` (`EarningsProof`). The fees and which tasks were joined come from the
node's transaction index (CometBFT's `tx_search`), which no app hash covers: a node could hide a transaction
there, never change what a proven task shows.
"""

from __future__ import annotations

import dataclasses

from trolly.chain.errors import ChainError, NotFound
from trolly.chain.market.records import ACTIVE
from trolly.chain.proto import market_pb2
from trolly.chain.tx import decode_tx, type_url_of
from trolly.wallet.errors import QueryFailed
from trolly.wallet.market_views import TaskView
from trolly.wallet.proofs import ProvenAnswer, proved_at
from trolly.wallet.proven_views import prove_task, prove_worker
from trolly.wallet.rpc import AsyncRpcClient
from trolly.wallet.rpc_types import TxResult

PAGE = 100
"""Transactions asked for per `tx_search` page (CometBFT's largest)."""

JOIN = type_url_of(market_pb2.MsgJoinTask())
COMMIT = type_url_of(market_pb2.MsgCommitRound())


@dataclasses.dataclass(frozen=True)
class RoundEarnings:
    round: int
    outcome: str
    """The commitment's outcome (passed, failed, unverified, disagreed, pending); `final report` for the report
    of the final weights; `not committed` for a round whose commitment fee was paid but that shows none."""
    pay: int
    fees: int
    """Fees of the transactions that carried this round's commitment (a resent one included)."""


@dataclasses.dataclass(frozen=True)
class Deduction:
    """Collateral this worker lost on a task: a `penalty` (dropped: a missed round, weights that lost the
    agreement), or a `slash` (a verified cheat)."""

    round: int
    kind: str
    amount: int
    reason: str


@dataclasses.dataclass(frozen=True)
class TaskEarnings:
    task_id: int
    task_status: str
    member_status: str
    collateral_locked: int
    collateral_returned: int
    """Back in the balance once the member left (0 while it is active: the collateral is still locked)."""
    join_fee: int
    rounds: tuple[RoundEarnings, ...]
    deductions: tuple[Deduction, ...]

    @property
    def pay(self) -> int:
        return sum(r.pay for r in self.rounds)

    @property
    def fees(self) -> int:
        return self.join_fee + sum(r.fees for r in self.rounds)

    @property
    def net(self) -> int:
        """What the task moved this worker's balance by, once it left: pay less deductions and fees."""
        return self.pay - sum(d.amount for d in self.deductions) - self.fees

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "pay": self.pay, "fees": self.fees, "net": self.net}


@dataclasses.dataclass(frozen=True)
class EarningsProof:
    """The heights of the proven answers the earnings were read from (each task's pages, the worker's record)."""

    heights: tuple[int, ...]
    keys: int
    """State keys proven over all of them."""

    @classmethod
    def of(cls, answers: list[ProvenAnswer]) -> "EarningsProof":
        return cls(tuple(sorted({a.height for a in answers})), sum(a.keys for a in answers))

    def note(self) -> str:
        return proved_at(list(self.heights)) if self.heights else "nothing to prove (no task, no registration)"

    def to_json(self) -> dict:
        return {"verified": True, "note": self.note(), "query_heights": list(self.heights), "keys": self.keys,
                "unproven": "fees and the tasks joined: the node's transaction index (CometBFT's, no app hash)"}


@dataclasses.dataclass(frozen=True)
class Earnings:
    address: str
    tasks: tuple[TaskEarnings, ...]
    other_fees: int
    """Fees of transactions that belong to no task (registering, updating, leaving)."""
    stake: int
    """Staked while registered: out of the balance, not spent (it returns after unregistering and unbonding)."""
    unbonding: int
    """Stake on its way back after unregistering."""
    proof: EarningsProof

    @property
    def net(self) -> int:
        return sum(task.net for task in self.tasks) - self.other_fees

    def to_json(self) -> dict:
        return {"address": self.address, "tasks": [task.to_json() for task in self.tasks],
                "other_fees": self.other_fees, "net": self.net, "stake": self.stake, "unbonding": self.unbonding,
                "proof": self.proof.to_json()}

    def lines(self) -> list[str]:
        lines = [f"worker {self.address}"]
        for task in self.tasks:
            returned = (f"returned {task.collateral_returned}" if task.member_status != ACTIVE
                        else "still locked")
            lines.append(f"task {task.task_id} ({task.task_status}, {task.member_status}): pay {task.pay} utrl, "
                         f"fees {task.fees} utrl, net {task.net} utrl; collateral {task.collateral_locked} utrl "
                         f"locked, {returned}; join fee {task.join_fee}")
            for row in task.rounds:
                lines.append(f"  round {row.round:>3}  {row.outcome:13} pay {row.pay:>10}  fees {row.fees:>8}")
            for deduction in task.deductions:
                lines.append(f"  round {deduction.round:>3}  {deduction.kind:13} -{deduction.amount} utrl: "
                             f"{deduction.reason}")
        if not self.tasks:
            lines.append("no tasks joined")
        lines.append(f"fees outside tasks {self.other_fees} utrl; net over all {self.net} utrl")
        lines.append(f"staked {self.stake} utrl (out of the balance while registered, not spent)"
                     + (f"; {self.unbonding} utrl unbonding" if self.unbonding else ""))
        lines.append(f"{self.proof.note()} (tasks and stake; fees from the node's transaction index)")
        return lines


@dataclasses.dataclass(frozen=True)
class Charged:
    """One transaction the worker signed that was charged its fee: what it belonged to."""

    fee: int
    kind: str
    task_id: int = 0
    round: int = -1


def charged(result: TxResult) -> Charged | None:
    """The fee a signed transaction was charged (its `tx` event: a transaction whose checks failed before the fee
    was taken has none) and what its first message belongs to."""
    fee = next((int(event.get("fee", "0")) for event in result.events if event.type == "tx"), None)
    if fee is None:
        return None
    try:
        messages = decode_tx(result.tx).body.messages
    except ChainError:
        return Charged(fee, "other")
    first = messages[0] if messages else None
    if first is not None and first.type_url == JOIN:
        return Charged(fee, "join", market_pb2.MsgJoinTask.FromString(first.value).task_id)
    if first is not None and first.type_url == COMMIT:
        commit = market_pb2.MsgCommitRound.FromString(first.value)
        return Charged(fee, "commit", commit.task_id, commit.round)
    return Charged(fee, "other")


async def signed_transactions(rpc: AsyncRpcClient, address: str) -> list[TxResult]:
    """Every transaction `address` signed that a block included, oldest first, page by page."""
    results: list[TxResult] = []
    page = 1
    while True:
        found, total = await rpc.tx_search(f"tx.signer='{address}'", page=page, per_page=PAGE)
        results.extend(found)
        if not found or len(results) >= total:
            return results
        page += 1


def task_earnings(view: TaskView, address: str, charges: list[Charged]) -> TaskEarnings:
    """One task's figures for the member `address` (TaskView: the chain's record; `charges`: the worker's
    fees that belong to this task)."""
    member = view.member(address)
    if member is None:
        raise ValueError(f"{address} is not a member of task {view.id}")
    round_fees: dict[int, int] = {}
    for charge in charges:
        if charge.kind == "commit":
            round_fees[charge.round] = round_fees.get(charge.round, 0) + charge.fee
    rows = []
    for detail in view.round_details:
        commitment = detail.commitment_of(address)
        if commitment is None and detail.round not in round_fees:
            continue
        outcome = ("not committed" if commitment is None else "final report" if detail.final_report
                   else commitment.outcome)
        rows.append(RoundEarnings(detail.round, outcome, commitment.paid if commitment else 0,
                                  round_fees.pop(detail.round, 0)))
    rows += [RoundEarnings(r, "not committed", 0, fee) for r, fee in sorted(round_fees.items())]
    deductions = []
    if member.penalized:
        deductions.append(Deduction(member.left_round, "penalty", member.penalized, member.reason))
    if member.slashed:
        deductions.append(Deduction(member.left_round, "slash", member.slashed, member.reason))
    locked = view.collateral
    returned = 0 if member.status == ACTIVE else locked - member.penalized - member.slashed
    return TaskEarnings(view.id, view.status, member.status, locked, returned,
                        sum(c.fee for c in charges if c.kind == "join"), tuple(rows), tuple(deductions))


async def worker_earnings(rpc: AsyncRpcClient, address: str) -> Earnings:
    """Everything `address` earned and paid as a worker, from the chain: each task and the worker's record proven
    (ProofInvalid when one does not hold)."""
    charges = [c for c in map(charged, await signed_transactions(rpc, address)) if c is not None]
    joined = sorted({c.task_id for c in charges if c.kind == "join"})
    tasks = []
    proven: list[ProvenAnswer] = []
    for task_id in joined:
        task = await prove_task(rpc, task_id)
        proven += [task.overview] + [page for round_proof in task.rounds for page in round_proof.pages]
        if task.view.member(address) is None:  # a join that was refused: its fee is paid all the same
            continue
        tasks.append(task_earnings(task.view, address, [c for c in charges if c.task_id == task_id]))
    counted = {task.task_id for task in tasks}
    other = sum(c.fee for c in charges if c.task_id not in counted)
    try:
        worker, answer = await prove_worker(rpc, address)
    except QueryFailed as error:
        if error.code != NotFound.code:
            raise
        stake = unbonding = 0  # never registered, or its stake fully back
    else:
        proven.append(answer)
        stake = worker.record.stake if worker.record is not None else 0
        unbonding = sum(entry.amount for entry in worker.unbonding)
    return Earnings(address, tuple(tasks), other, stake, unbonding, EarningsProof.of(proven))
