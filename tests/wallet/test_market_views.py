"""The typed market views (`wallet/market_views.py`): every answer of the real market module reads into its view
and writes back as the same JSON (so each view knows every field the chain sends), and an answer a view does not
understand is refused with `MarketAnswerError`, naming the field."""

from __future__ import annotations

import ast
import copy
import dataclasses
import pathlib

import pytest

from chain_helpers import Chain
from market_helpers import MARKET_PARAMS, Market, digest
from trolly.chain.crypto import encode_address
from trolly.chain.market.params import MarketParams
from trolly.chain.proto import market_pb2 as pb
from trolly.wallet.errors import MarketAnswerError, WalletError
from trolly.wallet.market_answers import parse_answer
from trolly.wallet.market_views import (RoundPage, SampledSegment, TaskOverview, TaskPage, TaskSpecView, TaskView,
                                        VerifyWork, WorkerView)
from whole_task import whole_task


@pytest.fixture(scope="module")
def answers():
    """Answers of every market query, over a task taken through a verified round (votes and reveals included),
    a second round, its final report, an open task, and a worker that unregistered (only unbonding now); the reveal
    window is long enough that no round's votes are deleted yet (`test_a_round_whose_votes_were_deleted_says_so`
    reads one that was). Built once for the module: every block checks the invariants (`chain_helpers.Chain`)."""
    chain = Chain(accounts=5, validators=1, params={"market": {**MARKET_PARAMS, "reveal_window": 100}})
    market = Market(chain)
    operator = chain.operators[0]
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()  # the sampling block
    pending = chain.query(f"/market/verify/{encode_address(operator.address)}")
    market.vote([operator], task_id)
    market.reveal(task_id)
    market.commit(task_id, 1, market.workers[:2])
    chain.block()
    market.vote([operator], task_id)
    market.report_final(task_id, 2, market.workers[:2], [digest("final")] * 2)
    other = market.submit(workers=2)  # open, no rounds yet
    leaver = market.workers[3]
    assert chain.deliver(leaver, pb.MsgUnregisterWorker()).ok
    return {
        "task": chain.query(f"/market/task/{task_id}"), "open task": chain.query(f"/market/task/{other}"),
        "whole task": whole_task(chain.query, task_id), "whole open task": whole_task(chain.query, other),
        "round": chain.query(f"/market/task/{task_id}/round/0"), "tasks": chain.query("/market/tasks"),
        "spec": chain.query(f"/market/spec/{task_id}"),
        "worker": chain.query(f"/market/worker/{encode_address(market.workers[0].address)}"),
        "unbonding worker": chain.query(f"/market/worker/{encode_address(leaver.address)}"),
        "verify": pending, "params": chain.query("/market/params"),
    }


VIEWS = {"task": TaskOverview, "open task": TaskOverview, "whole task": TaskView, "whole open task": TaskView,
         "round": RoundPage, "tasks": TaskPage, "spec": TaskSpecView, "worker": WorkerView,
         "unbonding worker": WorkerView}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_every_answer_reads_into_its_view_and_writes_back_unchanged(answers, name):
    assert VIEWS[name].from_answer(answers[name]).to_answer() == answers[name]


def test_a_round_whose_votes_were_deleted_says_so():
    """Once a round's reveal window closed its votes are gone: the view reads the commitment with no verdicts and
    `verdicts_deleted`, so a client does not take the empty list for a round nobody voted on."""
    chain = Chain(accounts=3, validators=1, params={"market": {**MARKET_PARAMS, "reveal_window": 2}})
    market = Market(chain)
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    market.vote(chain.operators, task_id)
    market.reveal(task_id)
    chain.advance(2)
    page = RoundPage.from_answer(chain.query(f"/market/task/{task_id}/round/0"))
    assert page.commitments and all(c.verdicts_deleted and c.verdicts == () and c.outcome == "passed"
                                    for c in page.commitments)


def test_the_answers_cover_every_part_of_a_task(answers):
    task = TaskView.from_answer(answers["whole task"])
    worker = task.members[1].worker
    commitment = task.round_detail(0).commitment_of(worker)
    assert task.member(worker).index == 1 and commitment.worker == worker
    assert task.member(task.requester) is None and task.round_detail(0).commitment_of(task.requester) is None
    assert task.status == "completed" and len(task.round_details) == 3 and task.round_details[2].final_report
    assert commitment.verdicts[0].replay_digest and commitment.committees[0] and commitment.paid > 0
    assert not commitment.verdicts_deleted
    assert WorkerView.from_answer(answers["worker"]).record.hardware.memory_mb == 1024
    unbonding = WorkerView.from_answer(answers["unbonding worker"])
    assert (unbonding.registered, unbonding.record, len(unbonding.unbonding)) == (False, None, 1)


def test_the_segments_to_verify_read_as_sampled_segments(answers):
    work = VerifyWork.from_answer(answers["verify"])
    assert work.unreadable == () and len(work.segments) == len(answers["verify"]["segments"]) > 0
    assert [segment.to_answer() for segment in work.segments] == answers["verify"]["segments"]


def test_the_market_params_read_into_the_chains_own_type(answers):
    params = parse_answer(MarketParams, answers["params"], "/market/params")
    assert dataclasses.asdict(params) == answers["params"]


def test_a_round_is_found_by_its_number_not_its_place(answers):
    task = TaskView.from_answer(answers["whole task"])
    reordered = dataclasses.replace(task, round_details=tuple(reversed(task.round_details)))
    assert reordered.round_detail(0) == task.round_details[0] and reordered.round_detail(7) is None


def broken(answer: dict, path: tuple, value) -> dict:
    """`answer` with the value at `path` replaced (or removed, for value REMOVE)."""
    answer = copy.deepcopy(answer)
    *parents, last = path
    holder = answer
    for key in parents:
        holder = holder[key]
    if value is REMOVE:
        del holder[last]
    else:
        holder[last] = value
    return answer


REMOVE = object()


@pytest.mark.parametrize("path,value,complaint", [
    (("id",), REMOVE, "TaskView: the answer has no 'id'"),
    (("round",), True, r"TaskView.round: expected int, got True"),
    (("rounds",), "2", r"TaskView.rounds: expected int, got '2'"),
    (("status",), "paused", r"TaskView.status: unknown value 'paused' \(known: abandoned, cancelled"),
    (("spec_hash",), "ABCD", r"TaskView.spec_hash: expected lower-case hex, got 'ABCD'"),
    (("requester",), "cosmos1xyz", r"TaskView.requester: expected a trolly1... address"),
    (("members", 1, "index"), None, r"TaskView.members\[1\].index: expected int, got NoneType"),
    (("round_details", 0, "commitments", 0, "verdicts"), {}, r"commitments\[0\].verdicts: expected a list, got dict"),
    (("round_details", 0, "commitments", 0, "decisions", 0), "maybe", r"decisions\[0\]: unknown value 'maybe'"),
    (("terms",), {"fee": "1"}, r"TaskView.terms: expected an object of integers"),
])
def test_an_answer_the_view_does_not_understand_is_refused_naming_the_field(answers, path, value, complaint):
    with pytest.raises(MarketAnswerError, match=complaint):
        TaskView.from_answer(broken(answers["whole task"], path, value))


def test_a_market_answer_error_is_a_wallet_error_and_fields_beyond_the_view_are_left_alone(answers):
    assert issubclass(MarketAnswerError, WalletError)
    whole = answers["whole task"]
    assert TaskView.from_answer({**whole, "added_later": 1}) == TaskView.from_answer(whole)
    with pytest.raises(MarketAnswerError, match="TaskPage: expected an object, got list"):
        TaskPage.from_answer([])
    with pytest.raises(MarketAnswerError, match="/market/params: market.sampling_delay must be >= 1"):
        parse_answer(MarketParams, {**answers["params"], "sampling_delay": 0}, "/market/params")


def test_a_registered_worker_without_its_record_is_refused(answers):
    with pytest.raises(MarketAnswerError, match="WorkerView: the answer has no 'stake'"):
        WorkerView.from_answer(broken(answers["worker"], ("stake",), REMOVE))


def test_an_unreadable_segment_to_verify_is_set_aside_and_the_others_kept(answers):
    first, *others = answers["verify"]["segments"]
    work = VerifyWork.from_answer({**answers["verify"], "segments": [{**first, "segment": "x"}, *others]})
    assert work.segments == tuple(SampledSegment.from_answer(s) for s in others)
    (reason,) = work.unreadable
    assert reason.startswith("VerifyWork.segments[0].segment: expected int")
    with pytest.raises(MarketAnswerError, match="VerifyWork.segments: expected a list, got NoneType"):
        VerifyWork.from_answer({**answers["verify"], "segments": None})


# ---- one reading: no client reads a market answer's keys itself ---------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIENTS = ("compute", "verifier", "wallet", "localnet", "console")
"""The packages that ask the market (`chain` answers it; `abci_app` serves the answers, never reads them)."""
THE_READING = {"wallet/market_views.py", "wallet/market_answers.py", "wallet/sender.py", "wallet/staking_views.py"}
OTHER_DOCUMENTS = {
    "wallet/rpc.py": ({"address", "height", "id", "pub_key", "total"},
                      "CometBFT's JSON-RPC results (node info, headers, validators)"),
    "wallet/rpc_types.py": ({"height", "index"}, "CometBFT's JSON-RPC results"),
    "wallet/keyring.py": ({"address", "seed"}, "the keyring's own key files"),
    "wallet/armor.py": ({"address"}, "armored key headers"),
    "wallet/proofs.py": ({"address"}, "the /account answer"),
    "wallet/sender.py": ({"address"}, "the /account answer"),
    "wallet/tasks.py": ({"rounds"}, "a task spec's training section"),
    "wallet/requester.py:submitted_task_id": ({"id"}, "a transaction result's `task` event attributes"),
    "console/new_task_api.py:_submit": ({"round_blocks"}, "the New task page's own request body"),
    "wallet/cli/task.py:read_spec": ({"rounds"}, "a task spec's training section"),
    "wallet/cli/query.py": ({"address", "amount", "height", "maturity_height", "stake", "operator"},
                            "transactions' JSON"),
    "wallet/cli/query.py:account.render": (None, "the command's own JSON output (`AccountState.to_json`)"),
    "wallet/cli/query.py:validators": (None, "the command's own JSON output (`ValidatorView.to_answer`)"),
    "wallet/cli/query.py:signing_info.render": (None, "the command's own JSON output (`SigningInfoView.to_answer`)"),
    "wallet/cli/query.py:unbonding": (None, "the command's own JSON output (`Unbondings.to_answer`)"),
    "wallet/cli/query.py:validators.render": (None, "the command's own JSON output (`ValidatorView.to_answer`)"),
    "wallet/cli/query.py:unbonding.render": (None, "the command's own JSON output (`Unbondings.to_answer`)"),
    "wallet/cli/query.py:delegations.render": (None, "the command's own JSON output (`Delegations.to_answer`)"),
    "wallet/cli/query.py:rewards.render": (None, "the command's own JSON output (`Rewards.to_answer`)"),
    "wallet/cli/query.py:validator": (None, "the command's own JSON output (`ValidatorDetail.to_answer`)"),
    "wallet/cli/query.py:delegations": (None, "the command's own JSON output (`Delegations.to_answer`)"),
    "wallet/cli/query.py:rewards": (None, "the command's own JSON output (`Rewards.to_answer`)"),
    "wallet/cli/query.py:transaction.render": (None, "the command's own JSON output (a transaction described)"),
    "wallet/cli/stake.py:parse_consensus_pubkey": ({"pub_key"}, "CometBFT's priv_validator_key.json"),
    "wallet/cli/transactions.py:render_plan": ({"nonce"}, "the command's own JSON output (a planned transaction)"),
    "compute/spec.py": ({"batch_size", "checkpoint_every", "inner_steps", "rounds", "seed", "threads"},
                        "a task spec's training section"),
    "compute/worker/fit.py": ({"batch_size"}, "a task spec's training section"),
    "wallet/proven_views.py:prove_signing_info": ({"consensus_address"}, "the proven /validator record's own JSON"),
    "console/wallet_api.py:_overview": ({"balance", "nonce"}, "the proven /account answer (`AccountState`'s fields)"),
    "compute/requester/budget.py:budget_of": ({"batch_size", "inner_steps", "rounds"}, "a task spec's training section"),
    "compute/requester/cli.py:sized": ({"batch_size", "checkpoint_every"}, "a task spec's training section"),
    "compute/worker/preflight.py:unfit_reasons": ({"batch_size", "threads"},
                                                  "a task spec's training and determinism sections"),
    "wallet/task_fit.py:requirements": ({"batch_size", "threads"}, "a task spec's training and determinism sections"),
    "wallet/task_fit.py:registered_workers": ({"address"}, "the attributes of `worker` events (tx_search)"),
    "compute/worker/progress.py": ({"rounds", "tasks"}, "the worker's own state file"),
    "compute/blobs/server.py": ({"round", "task_id"}, "aiohttp's route match"),
    "verifier/segment_check.py:SegmentReport.evidence": ({"details"}, "the verifier's own evidence record"),
    "verifier/isa_child_replay.py": ({"spec", "threads", "worker_index"}, "requests to the replay child process"),
    "verifier/segment_check.py:SegmentClaim.from_json": (None, "the verifier's own claim files (SegmentClaim.to_json)"),
    "console/compute_api.py:_overview": ({"address"}, "the keyring entries it lists a few lines above"),
    "console/round_charts.py:record_chain_hashes": ({"round"}, "the chart's own cached points"),
}
"""Files, or one function of a file, that read JSON of their own whose keys share names with the market's: the
keys each may read (None: any), and what it reads them from."""


def market_keys() -> set[str]:
    """The keys of every answer with a typed view: the market's, `/account`'s, the staking answers' and `/signing_info`'s."""
    from trolly.wallet import market_views
    from trolly.wallet.sender import AccountState
    from trolly.wallet import staking_views

    views = [v for v in vars(market_views).values() if isinstance(v, type) and issubclass(v, market_views.MarketView)]
    views += [v for v in vars(staking_views).values() if dataclasses.is_dataclass(v)]
    return {f.name for view in views + [MarketParams, AccountState] for f in dataclasses.fields(view)}


def key_reads(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(enclosing function, line, key) of every `x["key"]` load and `x.get("key", ...)` in a module."""
    reads = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = f"{scope}.{child.name}".lstrip(".") if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope
            key = None
            if isinstance(child, ast.Subscript) and isinstance(child.ctx, ast.Load):
                key = child.slice.value if isinstance(child.slice, ast.Constant) else None
            elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == "get"
                  and child.args and isinstance(child.args[0], ast.Constant)):
                key = child.args[0].value
            if isinstance(key, str):
                reads.append((inner, child.lineno, key))
            visit(child, inner)

    visit(tree, "")
    return reads


def test_no_client_reads_a_market_answer_key_outside_the_views():
    keys = market_keys()
    found = []
    for package in CLIENTS:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in THE_READING or "/proto/" in name:
                continue
            for scope, line, key in key_reads(ast.parse(path.read_text(), filename=name)):
                allowed, _ = OTHER_DOCUMENTS.get(f"{name}:{scope}", OTHER_DOCUMENTS.get(name, (set(), "")))
                if key in keys and allowed is not None and key not in allowed:
                    found.append(f"{name}:{line} ({scope or 'module'}) reads {key!r}")
    assert found == [], "read the market through trolly.wallet.market_views instead:\n" + "\n".join(found)


def test_the_scan_finds_a_raw_read_where_there_is_one():
    code = "def follow(view):\n    return view['round_details'][0].get('start_weights_hash')\n"
    assert [key for _, _, key in key_reads(ast.parse(code))] == ["start_weights_hash", "round_details"]


# ---- /account and /validators: read through their typed views too -------------------------------------------

VIEWED_PATHS = ("/account", "/validators", "/delegations", "/unbonding", "/rewards", "/signing_info")
"""Query paths whose answers have a typed view beside the market's: `AccountState` (wallet/sender.py) and
the staking and liveness views (wallet/staking_views.py)."""
PATH_READERS = {"wallet/sender.py": "AccountState, the one reading of /account",
                "wallet/staking_views.py": "the one reading of /validators, /validator, /delegations, /unbonding, "
                                           "/rewards and /signing_info",
                "wallet/proofs.py": "a proved /account read: the proof needs the raw answer; its value is read by "
                                    "AccountState"}


def viewed_path_queries(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, path) of every call whose first argument is a query path, plain or an f-string, under
    `VIEWED_PATHS` (`query_json("/validators")`, `abci_query(f"/account/{address}")`, ...)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        first = node.args[0]
        if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
            first = first.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and any(
                first.value == path or first.value.startswith(path + "/") for path in VIEWED_PATHS):
            found.append((node.lineno, first.value))
    return sorted(found)


def test_no_client_queries_the_account_or_the_validators_outside_their_views():
    found = []
    for package in CLIENTS:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in PATH_READERS:
                continue
            found += [f"{name}:{line} asks {query!r}"
                      for line, query in viewed_path_queries(ast.parse(path.read_text(), filename=name))]
    assert found == [], ("read /account through trolly.wallet.sender.fetch_account and /validators through "
                         "trolly.wallet.proven_views.prove_validators instead:\n" + "\n".join(found))


def test_the_path_scan_finds_a_raw_account_or_validators_query_where_there_is_one():
    code = ("async def balance(rpc, me):\n    return (await rpc.query_json(f'/account/{me}'))['balance']\n"
            "def stakes(client):\n    return client.query_json('/validators')\n"
            "def other(client):\n    return client.query_json('/validator/x'), client.query_json('/accounts')\n")
    assert viewed_path_queries(ast.parse(code)) == [(2, "/account/"), (4, "/validators")]
