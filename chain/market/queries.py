"""The market's JSON queries: everything the wallet, the worker and the verifier need to follow a task.

/market/task/<id>          a task: terms, status, round r of R, members, paid so far, escrow remaining, final
                           weights hash, and `recorded_rounds`: its rounds 0..recorded_rounds-1 are asked for one
                           by one below (never inline, so the answer is the same size in round 1 and round 1,000)
/market/task/<id>/round/<r>[/after/<index>][/limit/<n>]
                           one round of it (agreed start weights hash, final report or not) and one page of its
                           commitments, with their segments, decisions and verdicts, in join order: those of
                           members after position `after` of the member list, at most MAX_COMMITMENTS_PER_PAGE;
                           `next` is the `after` of the following page (null: done). For the opening members the
                           position is the worker index; a replacement comes after them (docs/protocol.md 4.1c)
                           A round's verdicts are deleted when its reveal window closes (`vote_pruning`): its
                           commitments then answer no verdicts and `verdicts_deleted` true
/market/tasks[/open][/after/<id>][/limit/<n>]
                           every task (or only open and running ones), summarised, by ascending id, one page of
                           at most MAX_TASKS_PER_PAGE; `next` is the `after` of the following page (null: done)
/market/spec/<id>          the spec JSON exactly as submitted, and its hash
/market/worker/<address>   a worker: stake, hardware, blob URL, tasks, earnings; and any unbonding stake
/market/verify/<address>   the segments that validator must verify now (not yet voted on by it, not its own)
/market/data_key/<id>/<address>
                           the task's data key sealed to that member or validator (hex), once delivered
/market/key_recipients/<id> who may be delivered a private task's data key now (its active members once it runs,
                           the validators drawn onto its committees) and what each holds: at most 2 x
                           `workers_wanted` members and `max_validators` validators
/market/replay_gpus        every validator's declared GPUs: {"replayers": [{"validator", "gpus"}]}
/market/params             the market params
Addresses are bech32, hashes lower-case hex, amounts integers in utrl.

What one query costs is bounded by chain params, never by how long a task has run: the task answer reads the
task record (one entry, whose list of closed rounds' start hashes is at most `max_rounds` long) and its members
(at most 2 x `workers_wanted`, replacements included, and `workers_wanted` <= `max_workers`); a round page
visits at most as many members and answers at most `limit` commitments, each with its votes inline, which are
bounded too: only a sampled segment's committee votes on it, once per validator, and a committee is at most the
whole validator set (a segment escalates once, to that set), so a commitment carries at most
samples_per_worker (the task's terms) x staking.max_validators votes.
"""

from __future__ import annotations

import dataclasses
import itertools

from .. import keys
from ..crypto import decode_address, encode_address
from ..codec import decode_u64
from ..errors import InvalidRequest, NotFound
from ..listing_index import indexed_keys
from ..module import QueryResult, QueryRoute
from ..params import get_params
from ..state import State
from .data_keys import drawn_operators, find_key_box
from .params import MarketParams
from .replay_gpus import declared_replay_gpus
from .records import ACTIVE, RUNNING, VERDICT_NAMES, Commitment, KeyBox, Member, Task
from .store import find_commitment, find_member, find_task, find_worker, get_spec, last_task_id, unbonding_of_worker
from .tally import committee_votes
from .verify_work import verify_work
from .vote_pruning import votes_deleted


def _is_small_number(text: str) -> bool:
    """ASCII digits only (`str.isdigit` also takes '²' and other scripts' digits, which `int` refuses) and few
    enough of them that `int` never meets the interpreter's digit limit."""
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def _task_id(arg: str) -> int:
    if not _is_small_number(arg):
        raise InvalidRequest(f"task id must be a positive integer, got {arg[:40]!r}")
    return int(arg)


def _address(arg: str) -> bytes:
    return decode_address(arg)


def task_summary(task: Task) -> dict:
    return {
        "id": task.id, "requester": encode_address(task.requester), "spec_hash": task.spec_hash.hex(),
        "status": task.status, "phase": task.phase, "round": task.round, "rounds": task.rounds,
        "workers_wanted": task.workers_wanted, "workers_joined": len(task.members),
        "active_members": task.active_members, "reward_per_round": task.reward_per_round,
        "collateral": task.collateral, "budget": task.budget, "escrow_remaining": task.escrow,
        "paid_workers": task.paid_workers, "paid_fees": task.paid_fees, "refunded": task.refunded,
        "final_weights_hash": task.final_weights_hash.hex(),
        "open_slots": len(task.open_slots), "replacements": task.replacements,
    }


def member_view(member: Member, blob_url: str, relay: str = "", box: KeyBox | None = None) -> dict:
    return {
        "worker": encode_address(member.worker), "index": member.index, "status": member.status,
        "collateral": member.collateral, "paid": member.paid, "penalized": member.penalized,
        "slashed": member.slashed, "rounds_passed": member.rounds_passed, "samples_paid": member.samples_paid,
        "compensated": member.compensated,
        "first_round": member.first_round,
        "left_round": member.left_round, "reason": member.reason, "leaving": member.leaving, "blob_url": blob_url,
        "relay": relay, "data_key_box": box_view(box),
    }


def commitment_view(state: State, task: Task, commitment: Commitment) -> dict:
    """The commitment and its votes; once its round's reveal window closed the votes are deleted
    (`vote_pruning`), and `verdicts_deleted` says so rather than let an empty list read as "nobody voted"."""
    verdicts = []
    deleted = votes_deleted(task, commitment)
    for segment in [] if deleted else commitment.segments:
        for validator, vote in committee_votes(state, commitment, segment):  # by key: provable (4.7a)
            verdicts.append({"segment": segment, "validator": encode_address(validator),
                             "verdict": VERDICT_NAMES[vote.verdict], "evidence_hash": vote.evidence_hash.hex(),
                             "height": vote.height, "replay_commitment": vote.replay_commitment.hex(),
                             "replay_digest": vote.replay_digest.hex()})
    return {
        "worker": encode_address(commitment.worker), "update_hash": commitment.update_hash.hex(),
        "samples_processed": commitment.samples_processed, "steps": commitment.steps,
        "checkpoint_root": commitment.checkpoint_root.hex(), "num_checkpoints": commitment.num_checkpoints,
        "start_weights_hash": commitment.start_weights_hash.hex(),
        "determinism_profile": commitment.determinism_profile, "height": commitment.height,
        "residual_hash": commitment.residual_hash.hex(),
        "outcome": commitment.outcome, "segments": commitment.segments, "decisions": commitment.decisions,
        "paid": commitment.paid, "verdicts": verdicts, "verdicts_deleted": deleted,
        "committees": [[encode_address(bytes.fromhex(m)) for m in committee] for committee in commitment.committees],
        "escalated": commitment.escalated, "drawn": commitment.drawn, "held_verifier_fee": commitment.held_verifier_fee,
        "reveal_deadline": commitment.reveal_deadline,
    }


def round_page(state: State, task: Task, round_: int, after: int | None, limit: int) -> dict:
    """Round `round_` and the commitments of at most `limit` members after position `after` of the member list
    (all when None), in join order; `next` is the position the following page starts after (None: the last
    page)."""
    commitments: list[dict] = []
    last_index, more = None, False
    for index in range(0 if after is None else after + 1, len(task.members)):
        commitment = find_commitment(state, task.id, round_, task.members[index])
        if commitment is None:
            continue  # this member did not commit this round
        if len(commitments) == limit:
            more = True
            break
        commitments.append(commitment_view(state, task, commitment))
        last_index = index
    return {
        "round": round_,
        "start_weights_hash": task.round_start_hashes[round_].hex() if round_ < len(task.round_start_hashes) else "",
        "final_report": round_ == task.rounds,
        "commitments": commitments,
        "next": last_index if more else None,
    }


def recorded_rounds(task: Task) -> int:
    """How many rounds a task shows: rounds 0..round (the final report's included) once it started, none before."""
    return min(task.round, task.rounds) + 1 if task.started_height else 0


def task_view(state: State, task: Task) -> dict:
    view = task_summary(task)
    view.update({
        "progress": f"round {min(task.round + 1, task.rounds)} of {task.rounds}",
        "samples_per_worker": task.samples_per_worker, "round_blocks": task.round_blocks,
        "inner_steps": task.inner_steps, "batch_size": task.batch_size, "checkpoint_every": task.checkpoint_every,
        "seed": task.seed, "terms": task.terms, "created_height": task.created_height,
        "join_deadline": task.join_deadline, "started_height": task.started_height,
        "ended_height": task.ended_height, "phase_deadline": task.phase_deadline,
        "cancel_requested": bool(task.cancel_requested),
        "private_data": bool(task.private_data), "data_key_hash": task.data_key_hash.hex(),
    })
    members = []
    for address in task.members:
        worker = find_worker(state, address)
        members.append(member_view(find_member(state, task.id, address), worker.blob_url if worker else "",
                                   worker.relay if worker else "",
                                   find_key_box(state, task.id, address) if task.private_data else None))
    view["members"] = members
    view["recorded_rounds"] = recorded_rounds(task)
    return view


MAX_COMMITMENTS_PER_PAGE = 16
"""Most commitments one page of a round answers. Each carries its votes (see the module docstring for their
bound), so a page's work is bounded by the task's terms and the validator set's bound, whatever the number of the
task's workers or rounds."""

TASK_QUERY_USAGE = ("/market/task/<id> or /market/task/<id>/round/<r>[/after/<index>][/limit/<n>] "
                    f"with 1 <= n <= {MAX_COMMITMENTS_PER_PAGE}")


def _task_query(arg: str) -> tuple[int, tuple[int, int | None, int] | None]:
    """(task id, None) from `<id>`; (task id, (round, after, limit)) from `<id>/round/<r>[/after/<i>][/limit/<n>]`."""
    task_arg, *rest = arg.split("/")
    task_id = _task_id(task_arg)
    if not rest:
        return task_id, None
    page = _page_options(rest[2:], MAX_COMMITMENTS_PER_PAGE) if len(rest) >= 2 and rest[0] == "round" else None
    if page is None or not _is_small_number(rest[1]):
        raise InvalidRequest(f"unknown task query {arg[:80]!r}; use {TASK_QUERY_USAGE}")
    return task_id, (int(rest[1]), *page)


def query_task(state: State, arg: str, data: bytes) -> QueryResult:
    """`/market/task/<id>`, or one page of one round of it: `/market/task/<id>/round/<r>[/after/<i>][/limit/<n>]`."""
    task_id, round_query = _task_query(arg)
    task = find_task(state, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    if round_query is None:
        return QueryResult(task_view(state, task), proof_key=keys.market_task_key(task_id))
    round_, after, limit = round_query
    if round_ >= recorded_rounds(task):
        raise NotFound(f"task {task_id} has no round {round_} yet")
    return QueryResult(round_page(state, task, round_, after, limit))


MAX_TASKS_PER_PAGE = 100
"""Most tasks one listing answers: a flood of tasks makes more pages, never a slower page for every worker and
verifier that polls the listing."""


def _page_options(parts: list[str], max_limit: int) -> tuple[int | None, int] | None:
    """(after, limit) from a path's `[after/<n>][/limit/<n>]` parts (after None when absent, limit `max_limit`);
    None when the parts are anything else or the limit is not within 1..max_limit."""
    options: dict[str, int | None] = {"after": None, "limit": max_limit}
    names = parts[::2]
    if len(parts) % 2 or len(set(names)) != len(names) or not set(names) <= options.keys():
        return None
    for name, value in zip(parts[::2], parts[1::2]):
        if not _is_small_number(value):
            return None
        options[name] = int(value)
    if not 1 <= options["limit"] <= max_limit:
        return None
    return options["after"], options["limit"]


def _listing_options(arg: str) -> tuple[bool, int, int]:
    """(open only, after id, limit) from `[open][/after/<id>][/limit/<n>]`."""
    parts = arg.split("/") if arg else []
    open_only = bool(parts) and parts[0] == "open"
    page = _page_options(parts[1:] if open_only else parts, MAX_TASKS_PER_PAGE)
    if page is None:
        raise InvalidRequest(f"unknown task listing {arg[:80]!r}; use /market/tasks[/open][/after/<id>][/limit/<n>] "
                             f"with 1 <= n <= {MAX_TASKS_PER_PAGE}")
    after, limit = page
    return open_only, after or 0, limit


def query_tasks(state: State, arg: str, data: bytes) -> QueryResult:
    """One page of the task listing; tasks are visited by key, and only the page's are decoded."""
    open_only, after, limit = _listing_options(arg)
    if open_only:  # from the index of open tasks: one record, whatever their number (`listing_index`)
        ids = [decode_u64(key[1:]) for key in indexed_keys(state, keys.MARKET_OPEN_TASK)]
    else:
        ids = range(after + 1, last_task_id(state) + 1)
    page = list(itertools.islice((task_id for task_id in ids if task_id > after), limit + 1))
    more = len(page) > limit
    page = page[:limit]
    tasks = [task_summary(find_task(state, task_id)) for task_id in page]
    return QueryResult({"tasks": tasks, "next": page[-1] if more else None})


def query_spec(state: State, arg: str, data: bytes) -> QueryResult:
    task_id = _task_id(arg)
    task = find_task(state, task_id)
    spec = get_spec(state, task_id)
    if task is None or spec is None:
        raise NotFound(f"no task {task_id}")
    return QueryResult({"task_id": task_id, "spec_hash": task.spec_hash.hex(), "spec": spec.decode("utf-8")},
                       proof_key=keys.market_task_spec_key(task_id))


def query_worker(state: State, arg: str, data: bytes) -> QueryResult:
    address = _address(arg)
    worker = find_worker(state, address)
    unbonding = [{"maturity_height": h, "amount": amount} for h, amount in unbonding_of_worker(state, address)]
    if worker is None and not unbonding:
        raise NotFound(f"{arg} is not a registered worker")
    view = {"address": arg, "registered": worker is not None, "unbonding": unbonding}
    if worker is not None:
        view.update({
            "stake": worker.stake, "blob_url": worker.blob_url, "relay": worker.relay, "hardware": worker.hardware,
            "registered_height": worker.registered_height, "tasks": worker.tasks, "earned": worker.earned,
            "slashed": worker.slashed, "penalized": worker.penalized,
        })
    return QueryResult(view, proof_key=keys.market_worker_key(address))


def query_verify(state: State, arg: str, data: bytes) -> QueryResult:
    """The segments awaiting verdicts on whose committee this validator sits and on which it has not voted yet
    (never its own work), oldest task first (`verify_work`: found through the records, so the answer is proven)."""
    return QueryResult({"validator": arg, "segments": verify_work(state, _address(arg))})


def box_view(box: KeyBox | None) -> dict:
    """When a box was delivered and reported bad (0: not delivered, not reported)."""
    return {"delivered_height": box.delivered_height if box else 0,
            "reported_height": box.reported_height if box else 0}


def query_data_key(state: State, arg: str, data: bytes) -> QueryResult:
    task_text, _, address_text = arg.partition("/")
    task_id, recipient = _task_id(task_text), _address(address_text)
    box = find_key_box(state, task_id, recipient)
    if box is None:
        raise NotFound(f"no data key of task {task_id} for {address_text[:60]} (yet)")
    return QueryResult({"task_id": task_id, "recipient": encode_address(recipient), "sealed_key": box.sealed.hex(),
                        **box_view(box)}, proof_key=keys.market_data_key_key(task_id, recipient))


def query_key_recipients(state: State, arg: str, data: bytes) -> QueryResult:
    task_id = _task_id(arg)
    task = find_task(state, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    recipients = []
    if task.private_data and task.status == RUNNING:
        members = [address for address in task.members if find_member(state, task_id, address).status == ACTIVE]
        recipients += [{"address": encode_address(address), "role": "member", "drawn_height": 0,
                        **box_view(find_key_box(state, task_id, address))} for address in members]
        recipients += [{"address": encode_address(operator), "role": "validator", "drawn_height": drawn,
                        **box_view(find_key_box(state, task_id, operator))}
                       for operator, drawn in drawn_operators(state, task_id) if operator not in members]
    return QueryResult({"task_id": task_id, "status": task.status, "data_key_hash": task.data_key_hash.hex(),
                        "recipients": recipients})


def query_replay_gpus(state: State, arg: str, data: bytes) -> QueryResult:
    return QueryResult({"replayers": [{"validator": encode_address(operator), "gpus": gpus}
                                      for operator, gpus in declared_replay_gpus(state)]})


def query_market_params(state: State, arg: str, data: bytes) -> QueryResult:
    return QueryResult(dataclasses.asdict(get_params(state, MarketParams)))


QUERIES = (
    QueryRoute("/market/task", query_task, "a task with its members and escrow: /market/task/<id>; a page of one "
               "round's commitments and verdicts: /market/task/<id>/round/<r>[/after/<index>][/limit/<n>]"),
    QueryRoute("/market/tasks", query_tasks, "a page of every task, or /market/tasks/open for open and running "
               "ones: /market/tasks[/open][/after/<id>][/limit/<n>]"),
    QueryRoute("/market/spec", query_spec, "a task's spec JSON: /market/spec/<id>"),
    QueryRoute("/market/worker", query_worker, "a worker: /market/worker/<address>"),
    QueryRoute("/market/verify", query_verify, "segments a validator must verify now: /market/verify/<address>"),
    QueryRoute("/market/data_key", query_data_key, "a private task's data key sealed to one recipient: "
               "/market/data_key/<id>/<address>"),
    QueryRoute("/market/key_recipients", query_key_recipients, "who may be delivered a private task's data key "
               "now, and what each holds: /market/key_recipients/<id>"),
    QueryRoute("/market/replay_gpus", query_replay_gpus, "the GPUs each validator's verifier replays"),
    QueryRoute("/market/params", query_market_params, "the market params"),
)
