"""Every chain read the wallet's CLI and the console show a person is proven (issue 36 item 4), or named below with
why not: a static audit (`read_audit`) follows each function of the display modules through the wallet, the
console and the compute library to every unproven store read (`query_json`, `abci_query` without `prove=True`) and
every read of CometBFT's own indexes (`tx_search`, `find_tx`, `validators`), and fails on one not listed here.

Not audited, by design: the node's live status and block headers (`status`, `block`: CometBFT's own, shown as the
node's word; a proof is checked against them), and the worker's and verifier's services (polling loops that act,
not display; `trolly-worker` and `trolly-verifier` are not the wallet or the console)."""

from __future__ import annotations

import pathlib

from read_audit import findings, load

ROOT = pathlib.Path(__file__).resolve().parents[2]
DISPLAY = ("wallet/cli/", "console/")

COMETBFT_OWN = ("CometBFT's own record, not the app's state: transactions and their results (signed into blocks by "
                "the validators; no app hash covers the transaction index), or CometBFT's validator set")
SIGNING = ("building a transaction: the nonce and the fee params the node gives only make the transaction pass or "
           "fail the chain's own checks (ante), which run on the chain's state; nothing is shown as state")
PLAN = ("the plan shown before signing: the chain checks the order against its own market params when it executes "
        "(collateral minimum, cost), so a lying node can only make the submission fail; the task is then shown proven")
FOLLOWING = ("a follow loop that acts (delivers a private task's key, serves the data) and prints a progress line "
             "per look, several a block: proving each look would wait a block per look; `task status` and the task "
             "page prove the same task")
DIAGNOSIS = ("`task why`: a diagnosis over every registered worker found through the transaction index "
             "(CometBFT's), comparing the spec's needs with what each declared; it shows no balance or pay")

CHART = ("the round chart follows a task as it runs and derives each W_r itself, compared with the chain's agreed "
         "start hashes; read through the proving views it failed to derive W_2 of the no-code test's task "
         "(tests/console/test_console_no_code.py), not diagnosed yet: the node's word until it is")
ALLOWED: dict[str, tuple[set[str], str]] = {
    "console/chain_reads.py:network_overview (cometbft)": ({"console/chain_reads.py:network_overview"}, COMETBFT_OWN),
    "console/chain_reads.py:search (cometbft)": ({"console/chain_reads.py:search"}, COMETBFT_OWN),
    "wallet/cli/query.py:validators (cometbft)": ({"wallet/cli/query.py:validators"}, COMETBFT_OWN),
    "compute/worker/earnings.py:signed_transactions (cometbft)": ({"console/compute_api.py:_overview"},
                                                                  COMETBFT_OWN + " (the fees of the earnings)"),
    "wallet/task_fit.py:registered_workers (cometbft)": ({"wallet/cli/task.py:why"}, DIAGNOSIS),
    "wallet/sender.py:TxSender (unproven store)": (
        {"console/signing.py:preview", "console/signing.py:sign_and_send", "wallet/cli/transactions.py:transact",
         "wallet/cli/tx.py:broadcast", "console/task_following.py:TaskFollowing",
         "console/task_following.py:TaskFollowing._run", "wallet/cli/following.py:follow_in_terminal"}, SIGNING),
    "wallet/sender.py:TxSender.fee_params (unproven store)": (
        {"console/signing.py:preview", "console/signing.py:sign_and_send", "wallet/cli/transactions.py:transact",
         "wallet/cli/tx.py:broadcast", "console/task_following.py:TaskFollowing",
         "console/task_following.py:TaskFollowing._run", "wallet/cli/following.py:follow_in_terminal"}, SIGNING),
    "wallet/sender.py:fetch_account_at (unproven store)": (
        {"console/signing.py:preview", "console/signing.py:sign_and_send", "wallet/cli/transactions.py:transact",
         "wallet/cli/tx.py:broadcast", "console/task_following.py:TaskFollowing",
         "console/task_following.py:TaskFollowing._run", "wallet/cli/following.py:follow_in_terminal",
         "wallet/cli/task.py:why"}, SIGNING + "; in `task why`, " + DIAGNOSIS),
    "wallet/market_queries.py:get_market_params (unproven store)": (
        {"console/new_task_api.py:_planned", "console/new_task_api.py:_submit", "wallet/cli/task.py:submit_order",
         "wallet/cli/task.py:why"}, PLAN + "; in `task why`, " + DIAGNOSIS),
    "wallet/market_queries.py:get_task (unproven store)": (
        {"console/task_following.py:TaskFollowing", "console/task_following.py:TaskFollowing._run",
         "wallet/cli/following.py:follow_in_terminal", "console/round_charts.py:RoundCharts", "console/round_charts.py:RoundCharts._run"},
        FOLLOWING + "; in the chart, " + CHART),
    "wallet/market_queries.py:get_task_overview (unproven store)": (
        {"console/task_following.py:TaskFollowing", "console/task_following.py:TaskFollowing._run",
         "wallet/cli/following.py:follow_in_terminal", "wallet/cli/task.py:why", "console/round_charts.py:RoundCharts", "console/round_charts.py:RoundCharts._run"},
        FOLLOWING + "; " + DIAGNOSIS + "; in the chart, " + CHART),
    "wallet/market_queries.py:get_key_recipients (unproven store)": (
        {"console/task_following.py:TaskFollowing", "console/task_following.py:TaskFollowing._run",
         "wallet/cli/following.py:follow_in_terminal"},
        FOLLOWING + "; the recipients are checked by the chain, which refuses a box to anyone it did not draw"),
    "wallet/market_queries.py:get_spec (unproven store)": ({"wallet/cli/task.py:why", "console/round_charts.py:RoundCharts", "console/round_charts.py:RoundCharts._run"},
                                                          DIAGNOSIS + "; in the chart, " + CHART),
    "wallet/market_queries.py:get_worker (unproven store)": ({"wallet/cli/task.py:why"}, DIAGNOSIS),
}
"""An unproven read (the function that makes it, and its kind) -> the display functions allowed to reach it, and
why it is not proven there. A display function not named, reaching it, fails the audit."""


def audit(root: pathlib.Path = ROOT) -> list[str]:
    modules = load(root, ["wallet", "console", "compute"], {"wallet/rpc.py"})
    entries = {m.path for m in modules.values() if m.path.startswith(DISPLAY)}
    unexplained = []
    for entry, reads in sorted(findings(modules, entries).items()):
        for read in sorted(reads):
            allowed, _ = ALLOWED.get(read, (set(), ""))
            if entry not in allowed:
                unexplained.append(f"{entry} shows {read}")
    return unexplained


def test_every_read_the_wallet_and_the_console_show_is_proven_or_explained():
    unexplained = audit()
    assert unexplained == [], ("read these through trolly.wallet.proven_views (prove_task, prove_account, ...) or "
                               "name them in ALLOWED with why not:\n" + "\n".join(unexplained))


def test_every_allowance_is_still_needed():
    """An allowance no display function uses any more is dropped, so the list says what is unproven now."""
    modules = load(ROOT, ["wallet", "console", "compute"], {"wallet/rpc.py"})
    entries = {m.path for m in modules.values() if m.path.startswith(DISPLAY)}
    used = {(read, entry) for entry, reads in findings(modules, entries).items() for read in reads}
    stale = [f"{read} for {entry}" for read, (allowed, _) in ALLOWED.items() for entry in allowed
             if (read, entry) not in used]
    assert stale == []


def test_the_audit_finds_an_unproven_read_behind_a_display_function(tmp_path):
    """The audit itself: a console page that shows a task read with `get_task` (the node's word), through a helper
    of the wallet, is found; one that reads it with `prove_task`, and a proven `abci_query`, are not."""
    (tmp_path / "wallet" / "cli").mkdir(parents=True)
    (tmp_path / "console").mkdir()
    (tmp_path / "compute").mkdir()
    (tmp_path / "wallet" / "__init__.py").write_text("")
    (tmp_path / "wallet" / "reads.py").write_text(
        "async def get_task(client, task_id):\n    return await client.query_json(f'/market/task/{task_id}')\n"
        "async def prove_task(client, task_id):\n    return await client.abci_query('/x', prove=True)\n"
        "async def helper(client):\n    return await get_task(client, 1)\n")
    (tmp_path / "console" / "page.py").write_text(
        "from trolly.wallet.reads import helper, prove_task\n"
        "async def shown(client):\n    return await helper(client)\n"
        "async def proven(client):\n    return await prove_task(client, 1)\n")
    assert audit(tmp_path) == ["console/page.py:shown shows wallet/reads.py:get_task (unproven store)"]
