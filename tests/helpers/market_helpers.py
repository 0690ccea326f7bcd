"""Helpers for the market's state-machine tests: a spec, and a `Market` driver over `chain_helpers.Chain`.

    def test_something(make_chain):
        market = Market(make_chain(accounts=6, validators=3))
        task_id = market.open_task(workers=2)           # registers and joins workers, returns the task id
        market.commit_all(task_id)                        # synthetic commitments (random-looking hashes)
        market.sample(task_id)                            # the block whose hash seeds sampling
        market.vote_all(task_id, VERDICT_PASS)            # every validator votes on every sampled segment

Commitments are synthetic: hashes are sha256 of a label, no training runs.
"""

from __future__ import annotations

import hashlib
import json

from trolly.chain.crypto import decode_address, encode_address
from trolly.chain.market.records import VERDICT_FAIL, VERDICT_PASS
from trolly.chain.proto import market_pb2 as pb
from whole_task import whole_task

SPEC = {
    "version": 1,
    "model": {"arch": "mlp", "config": {"hidden": [64]}},
    "dataset": {"name": "digits", "manifest_hash": "ab" * 32, "urls": ["http://127.0.0.1:8600"]},
    "training": {
        "rounds": 2, "inner_steps": 20, "batch_size": 8, "checkpoint_every": 5, "seed": 1234,
        "inner_optimizer": {"name": "adamw", "lr": 0.001, "weight_decay": 0.0},
        "outer_optimizer": {"name": "nesterov", "lr": 0.7, "momentum": 0.9},
    },
    "codec": "topk-int8",
    "determinism": {"threads": 1},
}

MARKET_PARAMS = {
    "min_worker_stake": 1_000_000,
    "min_collateral": 100_000,
    "worker_unbonding_blocks": 5,
    "verification_window": 5,
    "sampling_delay": 1,
    "min_round_blocks": 2,
}
CPU_PROFILE = "torch-2.13.0+cpu/threads-1/isa-avx2/deterministic-ftz"
"""The determinism profile of the synthetic commitments: a CPU profile of the form the chain knows."""
STAKE = 2_000_000
REWARD = 1_000_000
BATCH = SPEC["training"]["batch_size"]
CHECKPOINT_EVERY = SPEC["training"]["checkpoint_every"]
INNER_STEPS = SPEC["training"]["inner_steps"]


def spec_bytes(**training) -> bytes:
    spec = json.loads(json.dumps(SPEC))
    spec["training"].update(training)
    return json.dumps(spec).encode()


def edited(document: dict, path: list[str], value) -> dict:
    """A deep copy of a spec `document` with the value at `path` set to `value`, or removed when it is KeyError."""
    document = json.loads(json.dumps(document))
    target = document
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return document


def digest(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def submit_message(spec: bytes | None = None, **overrides) -> pb.MsgSubmitTask:
    spec = spec if spec is not None else spec_bytes()
    fields = dict(spec=spec, spec_hash=hashlib.sha256(spec).digest(), budget=10 * REWARD, workers=2,
                  rounds=2,
                  reward_per_round=REWARD, collateral=4 * REWARD, join_blocks=10, round_blocks=5,
                  samples_per_worker=2)
    fields.update(overrides)
    return pb.MsgSubmitTask(**fields)


def commit_message(task_id: int, round_: int, worker_label: str, steps: int = INNER_STEPS,
                   start: bytes | None = None, checkpoint_every: int = CHECKPOINT_EVERY,
                   **overrides) -> pb.MsgCommitRound:
    fields = dict(task_id=task_id, round=round_, update_hash=digest(f"update/{worker_label}/{round_}"),
                  samples_processed=steps * BATCH, steps=steps,
                  checkpoint_root=digest(f"root/{worker_label}/{round_}"),
                  residual_hash=digest(f"residual/{worker_label}/{round_}"),
                  num_checkpoints=-(-steps // checkpoint_every) + 1,
                  start_weights_hash=start if start is not None else digest(f"weights/{round_}"),
                  determinism_profile=CPU_PROFILE)
    fields.update(overrides)
    return pb.MsgCommitRound(**fields)


def final_message(task_id: int, rounds: int, weights: bytes | None = None) -> pb.MsgCommitRound:
    return pb.MsgCommitRound(task_id=task_id, round=rounds,
                             start_weights_hash=weights if weights is not None else digest(f"weights/{rounds}"))


SALT = b"s" * 32


def replay_digest(item: dict) -> bytes:
    """The synthetic replay digest every honest validator reveals for a segment."""
    return digest(f"replay/{item['worker']}/{item['round']}/{item['segment']}")


def verdict_message(operator, task_id: int, item: dict, verdict: int, evidence: bytes = b"e" * 32,
                    replayed: bytes | None = None) -> pb.MsgSubmitVerdict:
    """A vote on a `/market/verify` item, committed to `replayed` (default: the honest replay digest)."""
    from trolly.chain.market.reveals import replay_commitment

    replayed = replay_digest(item) if replayed is None else replayed
    return pb.MsgSubmitVerdict(task_id=task_id, round=item["round"], worker=decode_address(item["worker"]),
                               segment=item["segment"], verdict=verdict, evidence_hash=evidence,
                               replay_commitment=replay_commitment(operator.address, SALT, replayed))


def reveal_message(task_id: int, item: dict, replayed: bytes | None = None) -> pb.MsgRevealReplay:
    replayed = replay_digest(item) if replayed is None else replayed
    return pb.MsgRevealReplay(task_id=task_id, round=item["round"], worker=decode_address(item["worker"]),
                              segment=item["segment"], salt=SALT, replay_digest=replayed)


def assert_fails(result, error: type) -> None:
    assert (result.code, result.codespace) == (error.code, error.codespace), result.log


class Market:
    """Drives the market through a `chain_helpers.Chain`: accounts[0] is the requester, the others workers."""

    def __init__(self, chain) -> None:
        self.chain = chain
        self.requester = chain.accounts[0]
        self.workers = chain.accounts[1:]
        self.voted: list = []
        """(operator, task id, item) of every vote `vote` sent, for `reveal`."""

    # -- reading --------------------------------------------------------------------------------------------
    def task(self, task_id: int) -> dict:
        """The whole task, its rounds included, as clients assemble it from the chain's pages."""
        return whole_task(self.chain.query, task_id)

    def round_commitments(self, task_id: int, round_: int) -> dict:
        """worker bech32 -> commitment view."""
        details = self.task(task_id)["round_details"][round_]
        return {c["worker"]: c for c in details["commitments"]}

    def member(self, task_id: int, worker) -> dict:
        """The task's member view of `worker` (a key)."""
        return next(m for m in self.task(task_id)["members"] if m["worker"] == encode_address(worker.address))

    def to_verify(self, operator) -> list[dict]:
        return self.chain.query(f"/market/verify/{encode_address(operator.address)}")["segments"]

    # -- acting ---------------------------------------------------------------------------------------------
    def register(self, workers=None, stake: int = STAKE) -> None:
        workers = self.workers if workers is None else workers
        txs = [self.chain.tx(w, pb.MsgRegisterWorker(stake=stake, blob_url=f"http://127.0.0.1:{9000 + i}",
                                                     hardware=pb.HardwareProfile(device="cpu", samples_per_second=100,
                                                                                 memory_mb=1024, threads=1)))
               for i, w in enumerate(workers)]
        output = self.chain.block(*txs)
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]

    def submit(self, **overrides) -> int:
        result = self.chain.deliver(self.requester, submit_message(**overrides))
        assert result.ok, result.log
        return int(dict(next(e for e in result.events if e.type == "task").attributes)["id"])

    def join(self, task_id: int, workers) -> None:
        output = self.chain.block(*[self.chain.tx(w, pb.MsgJoinTask(task_id=task_id)) for w in workers])
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]

    def open_task(self, workers: int = 2, register: bool = True, **overrides) -> int:
        """Register the workers, submit a task for `workers` of them and have them join: the task is running."""
        if register:
            self.register()
        task_id = self.submit(workers=workers, **overrides)
        self.join(task_id, self.workers[:workers])
        assert self.task(task_id)["status"] == "running"
        return task_id

    def commit(self, task_id: int, round_: int, workers, steps=None, starts=None,
               checkpoint_every: int = CHECKPOINT_EVERY):
        """One block with a commitment from each of `workers` (steps and start hashes per worker optional)."""
        txs = []
        for i, w in enumerate(workers):
            kwargs = {"checkpoint_every": checkpoint_every}
            if steps is not None:
                kwargs["steps"] = steps[i]
            if starts is not None:
                kwargs["start"] = starts[i]
            txs.append(self.chain.tx(w, commit_message(task_id, round_, w.address.hex(), **kwargs)))
        output = self.chain.block(*txs)
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
        return output

    def vote(self, operators, task_id: int, verdict: int = VERDICT_PASS, worker=None, strict: bool = True):
        """One block in which each operator votes `verdict` on every segment awaiting it (only `worker`'s, a
        bech32 address, when given). `strict`: every vote must be accepted (a segment decided by earlier votes
        of the same block refuses later ones)."""
        txs = []
        for operator in operators:
            for item in self.to_verify(operator):
                if worker is not None and item["worker"] != worker:
                    continue
                if item["task_id"] != task_id:
                    continue
                txs.append(self.chain.tx(operator, verdict_message(operator, task_id, item, verdict,
                                                                   evidence=digest("evidence"))))
                self.voted.append((operator, task_id, item))
        output = self.chain.block(*txs)
        if strict:
            assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
        return output


    def report_final(self, task_id: int, rounds: int, workers, hashes, verdicts=None):
        """The final report: a block with each worker's reported final weights hash, the sampling block, then
        one block of votes per distinct verdict (`verdicts[i]` on worker i's report, PASS by default; its
        committee derives W_R) and one of their reveals. Returns the block of the last votes."""
        output = self.chain.block(*[self.chain.tx(w, final_message(task_id, rounds, h)) for w, h in zip(workers, hashes)])
        assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
        self.chain.block()  # the sampling block
        verdicts = verdicts or [VERDICT_PASS] * len(workers)
        for verdict in dict.fromkeys(verdicts):
            for worker, wanted in zip(workers, verdicts):
                if wanted == verdict:
                    output = self.vote(self.chain.operators, task_id, verdict, worker=encode_address(worker.address))
        self.reveal(task_id)
        return output

    def reveal(self, task_id: int | None = None, strict: bool = True):
        """One block in which every vote sent by `vote` (of `task_id` only, when given) reveals its honest digest."""
        txs = [self.chain.tx(operator, reveal_message(tid, item)) for operator, tid, item in self.voted
               if task_id is None or tid == task_id]
        self.voted = [v for v in self.voted if task_id is not None and v[1] != task_id]
        output = self.chain.block(*txs)
        if strict:
            assert all(r.ok for r in output.tx_results), [r.log for r in output.tx_results]
        return output


def market_snapshot(chain) -> dict:
    """Every market record plus the escrow balance: equal before and after a refused message."""
    from trolly.chain.market.store import ESCROW

    records = {k: v for k, v in chain.kv.items.items() if 0x20 <= k[0] <= 0x3f}
    return {"records": records, "escrow": chain.balance(ESCROW)}


def event_actions(output, action: str) -> list[dict]:
    """Attributes of every `task` event with this action: in a block's end-block events and tx events, or in one
    transaction's result."""
    events = list(output.events) + [e for r in getattr(output, "tx_results", ()) for e in r.events]
    return [dict(e.attributes) for e in events if e.type == "task" and dict(e.attributes).get("action") == action]


# -- a running two-worker task whose members come and go (replacements and leaves, docs/protocol.md 4.1c) -------
SLOT_COLLATERAL = 4 * REWARD
SLOT_PENALTY = SLOT_COLLATERAL * 1_000 // 10_000  # missed_round_penalty_bps default
SLOT_ROUNDS = 4
SLOT_ROUND_BLOCKS = 20


def slot_market(make_chain, accounts: int = 5) -> Market:
    return Market(make_chain(accounts=accounts, validators=1, params={"market": MARKET_PARAMS}))


def slot_task(make_chain, rounds: int = SLOT_ROUNDS, accounts: int = 5) -> tuple[Market, object, int]:
    """A `slot_market` with a running task of two workers and `rounds` rounds: the market, its chain, the task id."""
    market = slot_market(make_chain, accounts)
    task_id = market.open_task(workers=2, collateral=SLOT_COLLATERAL, rounds=rounds, spec=spec_bytes(rounds=rounds),
                               round_blocks=SLOT_ROUND_BLOCKS)
    return market, market.chain, task_id


def settle_round(market: Market, task_id: int, verdicts: dict | None = None) -> None:
    """Sample the closed round and vote on every commitment (PASS unless `verdicts` names a worker)."""
    market.chain.block()  # the sampling block
    verdicts = verdicts or {}
    for verdict in (VERDICT_PASS, VERDICT_FAIL):
        for item in {i["worker"] for i in market.to_verify(market.chain.operators[0])}:
            if verdicts.get(item, VERDICT_PASS) == verdict:
                market.vote(market.chain.operators, task_id, verdict, worker=item, strict=verdict == VERDICT_PASS)
    market.reveal(task_id, strict=not verdicts)  # a segment decided by an earlier FAIL takes no later vote
