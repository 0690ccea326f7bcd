"""End-block work is O(tasks with a deadline at this height): idle tasks cost nothing per block; and random
market histories keep every invariant (escrow, supply, schedule) after every block."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from chain_helpers import Chain
from market_helpers import MARKET_PARAMS, Market, commit_message, digest, reveal_message, submit_message
from market_helpers import verdict_message
from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS, VERDICT_UNAVAILABLE
from trolly.chain.proto import market_pb2 as pb
from trolly.chain.state import MemoryKV


class CountingKV(MemoryKV):
    """A committed store that counts the reads a block makes."""

    def __init__(self, items) -> None:
        super().__init__(items)
        self.reads = 0

    def get(self, key):
        self.reads += 1
        return super().get(key)

    def iterate(self, prefix):
        for item in super().iterate(prefix):
            self.reads += 1
            yield item


def reads_of_an_empty_block(idle_tasks: int) -> int:
    chain = Chain(accounts=2, validators=1, params={"market": MARKET_PARAMS}, check_each_block=False)
    market = Market(chain)
    for _ in range(idle_tasks):
        market.submit(join_blocks=1_000)
    chain.kv = CountingKV(chain.kv.items)
    chain.block()
    return chain.kv.reads


def test_an_empty_block_reads_the_same_with_1_or_40_idle_tasks():
    assert reads_of_an_empty_block(1) == reads_of_an_empty_block(40)


ACTIONS = st.lists(st.sampled_from(["commit", "commit_other_hash", "skip", "pass", "fail", "unavailable", "idle",
                                    "cancel", "join", "submit", "reveal"]), min_size=5, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS, st.integers(1, 3))
def test_random_market_histories_keep_every_invariant(actions, validators):
    """Each action is one block; the harness checks every module invariant after each block."""
    chain = Chain(accounts=5, validators=validators, params={"market": {**MARKET_PARAMS, "verification_window": 3,
                                                                          "reveal_window": 2, "committee_size": 2}})
    market = Market(chain)
    market.register()
    voted = []
    for action in actions:
        live = chain.query("/market/tasks/open")["tasks"]
        task = live[0] if live else None
        txs = []
        if action == "submit" or task is None:
            txs.append(chain.tx(market.requester, submit_message(workers=3)))
        elif action == "join" and task["status"] == "open":
            joined = {m["worker"] for m in market.task(task["id"])["members"]}
            txs += [chain.tx(w, pb.MsgJoinTask(task_id=task["id"])) for w in market.workers
                    if encode_address(w.address) not in joined][:3]
        elif action.startswith("commit") and task["status"] == "running":
            view = market.task(task["id"])
            start = digest("other") if action == "commit_other_hash" else None
            for member in view["members"]:
                if member["status"] == "active":
                    signer = next(w for w in market.workers if w.address == decode_address(member["worker"]))
                    if view["round"] == view["rounds"]:
                        message = pb.MsgCommitRound(task_id=task["id"], round=view["round"],
                                                    start_weights_hash=start or digest("final"))
                    else:
                        message = commit_message(task["id"], view["round"], member["worker"], start=start)
                    txs.append(chain.tx(signer, message))
                    start = None  # only the first member disagrees
        elif action in ("pass", "fail", "unavailable"):
            verdict = {"pass": VERDICT_PASS, "fail": VERDICT_FAIL, "unavailable": VERDICT_UNAVAILABLE}[action]
            for operator in chain.operators[:2]:
                for item in market.to_verify(operator):
                    txs.append(chain.tx(operator, verdict_message(operator, item["task_id"], item, verdict)))
                    voted.append((operator, item))
        elif action == "reveal":  # reveals of every vote so far: most fail (too early, too late, twice)
            txs += [chain.tx(operator, reveal_message(item["task_id"], item)) for operator, item in voted]
            txs.append(chain.tx(market.requester, pb.MsgCancelTask(task_id=task["id"])))
        chain.block(*txs)  # results may fail (late votes, closed rounds): invariants must hold regardless
