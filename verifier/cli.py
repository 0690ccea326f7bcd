"""`trolly-verifier`: run the verification service, or check one segment and explain the verdict.

    trolly-verifier start --key validator [--node URL] [--home DIR] [--wallet-home DIR] [--concurrency N]
                          [--relay-port P]                                  (a blob relay beside it)
                          [--metrics-laddr HOST:PORT] [--metrics-port-in-use continue|refuse]
    trolly-verifier replay --task 3 --round 1 --worker trolly1... --segment 4 [--node URL]
    trolly-verifier replay --claim claim.json --spec spec.json --checkpoints DIR      (offline, for disputes)
    trolly-verifier cheats                                                              (the registered cheats)
    trolly-verifier relay --node URL [--host H] [--port P]               (a blob relay for unreachable workers)

The home directory (`--home`, else $TROLLY_VERIFIER_HOME, else ~/.trolly-verifier) holds the vote record,
the evidence files and cached global weights. The signing key is the validator operator's, read from the
wallet keyring (`--wallet-home`, `--keyring-backend`, `--password-file` as in `trolly-wallet`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
import signal
import sys

import click

from trolly.compute.blobs import AddressPolicy, BlobClient, RetryPolicy
from trolly.compute.cheats import CHEATS, load_cheat_module
from trolly.compute.errors import ComputeError
from trolly.compute.spec import parse_spec
from trolly.wallet.errors import WalletError
from trolly.wallet.keyring import BACKENDS, Keyring
from trolly.wallet.market_queries import get_spec, get_task
from trolly.wallet.metrics_endpoint import CONTINUE, PORT_IN_USE_CHOICES, MetricsEndpointError
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.rpc import DEFAULT_NODE, AsyncRpcClient

from .dataset_fetch import TaskDatasets
from .errors import VerifierError
from .metrics import DEFAULT_METRICS_ADDRESS
from .segment_check import PASSED, Replayer, SegmentClaim, SegmentReport, verify_segment
from .service import ServiceConfig, VerifierService
from .checkpoint_sources import DirectorySource
from .relay_cli import relay, relay_beside
from .tolerance import MOMENTS_THRESHOLD, WEIGHTS_THRESHOLD

HOME_ENVIRONMENT_VARIABLE = "TROLLY_VERIFIER_HOME"
DEFAULT_HOME = "~/.trolly-verifier"
EXIT_FAIL_VERDICT = 3  # `replay` exits with this when the verdict is not PASS, so scripts can branch on it


def _home(value: str) -> pathlib.Path:
    return pathlib.Path(value).expanduser()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main_group() -> None:
    """Trolly verifier: replay sampled training segments and vote on chain."""


@main_group.command()
@click.option("--home", envvar=HOME_ENVIRONMENT_VARIABLE, default=DEFAULT_HOME, show_default=True,
              help=f"Verifier home: vote record, evidence, caches (env ${HOME_ENVIRONMENT_VARIABLE}).")
@click.option("--node", envvar="TROLLY_NODE", default=DEFAULT_NODE, show_default=True, help="CometBFT JSON-RPC URL.")
@click.option("--key", "key_name", required=True, help="Keyring name of the validator operator's key.")
@click.option("--wallet-home", envvar="TROLLY_WALLET_HOME", default="~/.trolly-wallet", show_default=True,
              help="Wallet home holding the keyring.")
@click.option("--keyring-backend", envvar="TROLLY_KEYRING_BACKEND", type=click.Choice(BACKENDS), default="file",
              show_default=True)
@click.option("--password-file", type=click.Path(dir_okay=False), help="Keyring password file (first line).")
@click.option("--concurrency", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Segments verified at once.")
@click.option("--poll-interval", type=click.FloatRange(0.1, 600), default=2.0, show_default=True,
              help="Seconds between polls when the node's websocket is not available.")
@click.option("--unavailable-attempts", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Failed fetches of a segment's checkpoints before voting UNAVAILABLE.")
@click.option("--retry-delay", type=click.FloatRange(0, 3600), default=5.0, show_default=True,
              help="Seconds before retrying a worker that did not serve its checkpoints.")
@click.option("--fee", type=click.IntRange(0), default=None, help="Fee per verdict in utrl (default: chain minimum).")
@click.option("--no-websocket", is_flag=True, help="Poll only; do not subscribe to new blocks.")
@click.option("--allow-private-blob-hosts", is_flag=True,
              help="Fetch blobs from loopback and private addresses too (a localnet; never on a public network).")
@click.option("--once", is_flag=True, help="One pass (verify and vote on what is due now), then exit.")
@click.option("--relay-port", type=click.IntRange(1, 65535), default=None,
              help="Also serve a blob relay (`relay`, default bounds, under HOME/relay) on this port.")
@click.option("--relay-host", default="127.0.0.1", show_default=True, help="Address the --relay-port relay listens on.")
@click.option("--relay-public-url", "relay_public_urls", multiple=True, metavar="URL",
              help="A URL workers reach the --relay-port relay by, as they register it (repeatable; default: "
                   "http://RELAY-HOST:RELAY-PORT): pushes are signed for it.")
@click.option("--test-switch-lazy-pass", "lazy", is_flag=True,
              help="TEST SWITCH, never on a real validator: vote PASS on every segment without replaying it "
                   "(to show that a lazy verifier loses its fee and pays a penalty).")
@click.option("--test-switch-vote-fail", "vote_fail", is_flag=True,
              help="TEST SWITCH, never on a real validator: vote FAIL on every segment, honest work included, "
                   "without replaying it (to show a dishonest validator outvoted, its votes on chain).")
@click.option("--test-switch-never-vote", "never_vote", is_flag=True,
              help="TEST SWITCH, never on a real validator: follow the chain but never vote (to show the others "
                   "deciding without this validator).")
@click.option("--metrics-laddr", default=DEFAULT_METRICS_ADDRESS, show_default=True,
              help="Where to serve this verifier's Prometheus metrics, HOST:PORT (0: nowhere).")
@click.option("--metrics-port-in-use", type=click.Choice(PORT_IN_USE_CHOICES), default=CONTINUE, show_default=True,
              help="That address taken: go on without metrics, or refuse to start.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def start(home, node, key_name, wallet_home, keyring_backend, password_file, concurrency, poll_interval,
          unavailable_attempts, retry_delay, fee, no_websocket, allow_private_blob_hosts, once, relay_port, relay_host,
          relay_public_urls, lazy, vote_fail, never_vote, metrics_laddr, metrics_port_in_use, verbose) -> None:
    """Follow the chain and verify every segment this validator is asked to check."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    if sum((lazy, vote_fail, never_vote)) > 1:
        raise click.UsageError("choose at most one test switch (lazy pass, vote fail, never vote)")
    keyring = Keyring(_home(wallet_home), keyring_backend, PasswordSource(password_file=password_file))
    signer = keyring.signer(key_name)
    config = ServiceConfig(home=_home(home), node=node, concurrency=concurrency, poll_interval=poll_interval,
                           unavailable_attempts=unavailable_attempts, retry_delay=retry_delay, fee=fee,
                           websocket=not no_websocket, allow_private_blob_hosts=allow_private_blob_hosts,
                           lazy_pass_without_replay=lazy, fail_without_replay=vote_fail, never_vote=never_vote,
                           metrics_address=metrics_laddr, metrics_port_in_use=metrics_port_in_use)
    for switch, what in ((vote_fail, "--test-switch-vote-fail: voting FAIL on every segment without replaying"),
                         (never_vote, "--test-switch-never-vote: never voting")):
        if switch:
            logging.getLogger("trolly.verifier").warning("TEST SWITCH %s", what)
    if lazy:
        logging.getLogger("trolly.verifier").warning("TEST SWITCH --test-switch-lazy-pass: voting PASS without "
                                                     "replaying; this validator will be penalised")
    try:
        asyncio.run(_run_service(config, signer, once, relay_host, relay_port, relay_public_urls))
    except MetricsEndpointError as error:
        raise click.ClickException(str(error)) from None


async def _run_service(config: ServiceConfig, signer, once: bool, relay_host: str, relay_port: int | None,
                       relay_public_urls: tuple[str, ...] = ()) -> None:
    service = VerifierService(config, signer)
    if once:
        try:
            reports = await service.run_once()
            for report in reports:
                click.echo(json.dumps({"segment": report.claim.to_json(), "verdict": report.verdict_name,
                                       "reason": report.reason}))
        finally:
            await service.close()
        return
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    async with relay_beside(config.home / "relay", config.node, relay_host, relay_port, stop,
                            allow_private=config.allow_private_blob_hosts, public_urls=relay_public_urls):
        await service.run(stop)


@main_group.command()
@click.option("--node", envvar="TROLLY_NODE", default=DEFAULT_NODE, show_default=True, help="CometBFT JSON-RPC URL.")
@click.option("--task", "task_id", type=click.IntRange(1), help="Task id (read the commitment from the chain).")
@click.option("--round", "round_index", type=click.IntRange(0), help="Round.")
@click.option("--worker", help="Worker address (trolly1...).")
@click.option("--segment", type=click.IntRange(0), help="Segment index.")
@click.option("--claim", "claim_file", type=click.Path(exists=True, dir_okay=False),
              help="Offline: a JSON claim (an entry of /market/verify) instead of --task/--round/--worker/--segment.")
@click.option("--spec", "spec_file", type=click.Path(exists=True, dir_okay=False),
              help="Offline: the task spec JSON (else read from the chain).")
@click.option("--checkpoints", "checkpoint_dir", type=click.Path(exists=True, file_okay=False),
              help="Read checkpoints from this blob-store directory instead of the worker's blob URL.")
@click.option("--expected-start", help="Hex hash of the round's global weights, if known (checked against the claim).")
@click.option("--allow-private-blob-hosts", is_flag=True,
              help="Fetch blobs from loopback and private addresses too (a localnet).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def replay(node, task_id, round_index, worker, segment, claim_file, spec_file, checkpoint_dir, expected_start,
           allow_private_blob_hosts, output) -> None:
    """Check one segment now and explain the verdict with its numbers (exit 3 when it is not PASS)."""
    if claim_file is None and None in (task_id, round_index, worker, segment):
        raise click.UsageError("give --task, --round, --worker and --segment, or --claim FILE")
    report = asyncio.run(_replay(node, task_id, round_index, worker, segment, claim_file, spec_file, checkpoint_dir,
                                 bytes.fromhex(expected_start) if expected_start else None,
                                 AddressPolicy(allow_private=allow_private_blob_hosts)))
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(explain(report))
    if report.outcome != PASSED:
        sys.exit(EXIT_FAIL_VERDICT)


async def _claim_from_chain(client: AsyncRpcClient, task_id: int, round_index: int, worker: str, segment: int) -> SegmentClaim:
    task = await get_task(client, task_id)
    details = task.round_detail(round_index)
    if details is None:
        raise VerifierError(f"task {task_id} has no round {round_index} yet")
    commitment = details.commitment_of(worker)
    member = task.member(worker)
    if commitment is None or member is None:
        raise VerifierError(f"{worker} has no commitment in round {round_index} of task {task_id}")
    return SegmentClaim(
        task_id=task_id, round=round_index, worker=worker, worker_index=member.index, segment=segment,
        checkpoint_root=bytes.fromhex(commitment.checkpoint_root), num_checkpoints=commitment.num_checkpoints,
        steps=commitment.steps, samples_processed=commitment.samples_processed,
        start_weights_hash=bytes.fromhex(commitment.start_weights_hash),
        determinism_profile=commitment.determinism_profile, blob_url=member.fetch_url,
        update_hash=bytes.fromhex(commitment.update_hash), spec_hash=task.spec_hash,
        residual_hash=bytes.fromhex(commitment.residual_hash))


async def _replay(node, task_id, round_index, worker, segment, claim_file, spec_file, checkpoint_dir,
                  expected_start, addresses: AddressPolicy) -> SegmentReport:
    async with AsyncRpcClient(node) as client:
        if claim_file:
            claim = SegmentClaim.from_json(json.loads(pathlib.Path(claim_file).read_text()))
        else:
            claim = await _claim_from_chain(client, task_id, round_index, worker, segment)
        if spec_file:
            spec_bytes = pathlib.Path(spec_file).read_bytes()
        else:
            spec_bytes = (await get_spec(client, claim.task_id)).spec_bytes
    spec = parse_spec(spec_bytes)
    retry = RetryPolicy(attempts=2, initial_delay=0.5, max_delay=2.0, request_timeout=30.0)
    dataset = await TaskDatasets().task_dataset(spec, [claim.blob_url], retry, addresses)
    if not checkpoint_dir and not claim.blob_url:
        raise VerifierError("the claim names no blob URL; pass --checkpoints DIR")
    replayer = Replayer()
    try:
        if checkpoint_dir:
            return await verify_segment(claim, spec, dataset, DirectorySource(checkpoint_dir), replayer,
                                        expected_start_hash=expected_start, expected_start_source="--expected-start")
        async with BlobClient([claim.blob_url], retry=retry, address_policy=addresses) as blobs:
            return await verify_segment(claim, spec, dataset, blobs, replayer, expected_start_hash=expected_start,
                                        expected_start_source="--expected-start")
    finally:
        replayer.close()


def explain(report: SegmentReport) -> str:
    """The verdict in words, with the numbers behind it."""
    claim = report.claim
    lines = [
        f"task {claim.task_id}, round {claim.round}, worker {claim.worker} (index {claim.worker_index}), "
        f"segment {claim.segment} of {claim.num_checkpoints - 1}",
        f"verdict: {report.verdict_name.upper()} ({report.outcome})",
        f"reason:  {report.reason}",
    ]
    comparison = report.comparison
    if comparison is not None:
        lines.append(f"mode:    {comparison.mode} (committed profile {claim.determinism_profile}; "
                     f"replayed under {report.details.get('replay_profile', '?')})")
        lines.append(f"errors:  weights {comparison.weights_error:.3e}, optimizer moments {comparison.moment_error:.3e} "
                     f"(relative to the segment's update norm {comparison.update_norm:.3e})")
        if comparison.mode == "tolerance":
            lines.append(f"limits:  weights {WEIGHTS_THRESHOLD:.1e}, moments {MOMENTS_THRESHOLD:.1e} (this CPU cannot run "
                         f"the committed instruction set; calibration in verifier/tolerance.py)")
    for key in ("start_step", "end_step", "fetch_seconds", "replay_seconds"):
        if key in report.details:
            lines.append(f"{key.replace('_', ' ')}: {report.details[key]}")
    lines.append(f"evidence hash: {report.evidence_hash().hex()}")
    return "\n".join(lines)


@main_group.command()
@click.option("--cheat-module", type=click.Path(exists=True, dir_okay=False), multiple=True,
              help="Python file registering more cheats.")
def cheats(cheat_module) -> None:
    """List the registered cheats (`compute.cheats`: the benchmark's, and `trolly-worker start --cheat NAME`'s)."""
    for path in cheat_module:
        load_cheat_module(path)
    for name, entry in sorted(CHEATS.items()):
        click.echo(f"{name:18} {entry.description}")


main_group.add_command(relay)


def main() -> None:
    try:
        main_group(standalone_mode=False)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except (VerifierError, WalletError, ComputeError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
