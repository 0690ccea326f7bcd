"""The requester's commands that need the compute library: `trolly-wallet data pack|serve`, `task fetch`,
`task eval`, and the data half of `task submit --data`.

The wallet registers them by name (`trolly.wallet.cli.COMMAND_GROUPS`, `trolly.wallet.cli.task.TASK_COMMANDS`,
`DATA_SUBMISSION`) and imports this module only when one is used. Each command is a thin call into
`compute.data.packing` or `compute.requester.results`; a refusal is `Error: ...` and a non-zero exit. What it
shares with the wallet's commands (options, output, errors) it takes from `wallet/command_line/`, below both: it
imports nothing of the wallet CLI that names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import threading

import click

from trolly.chain.errors import ChainError
from trolly.chain.market.data_keys import data_key_hash
from trolly.chain.market.datasets import CLASSIFICATION, REGRESSION, TASKS
from trolly.chain.market.spec import validate_spec
from trolly.wallet.command_line.errors import WalletGroup
from trolly.wallet.command_line.options import (PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE, node_options, output_option,
                                                settings)
from trolly.wallet.command_line.output import amount_text, emit, print_key_values, print_table
from trolly.wallet.errors import WalletError

from ..blobs import AddressPolicy
from ..data.encryption import DataKeyError, new_data_key
from ..data import Dataset
from ..data.packing import (DEFAULT_TEST_FRACTION, LORA_TEXT, SUMMARY_FILE, PackedDataset, for_one_task, open_packed,
                            pack_file, task_copy, write_packed)
from ..data.tokenized import DEFAULT_CONTEXT
from ..errors import ComputeError
from ..spec import lora_text_spec, parse_spec
from .budget import IMAGE_TRAINING, TABLE_TRAINING, Budget, budget_for, budget_of, table_spec
from .metrics import fetch_target
from .model_files import result_files
from .results import evaluate_result, fetch_dataset_of, fetch_result, write_result
from .serving import ServingThread

DEFAULT_LISTEN = "127.0.0.1:8600"
MODEL_CONFIGS = {"mlp": {"hidden": list(TABLE_TRAINING.hidden)}, "cnn": {}}
"""The model `task submit --data` trains when no spec file is given, by architecture (lora-text's: below)."""
MODEL_TRAINING = {"mlp": TABLE_TRAINING, "cnn": IMAGE_TRAINING}
"""How each of them is trained and for how long by default (`budget.py`)."""
MODELS = (*MODEL_CONFIGS, LORA_TEXT)
"""What `data pack --model` packs for and `task submit --data --model` trains: mlp and cnn read features,
lora-text a JSONL's texts as token ids of its base model's tokenizer (`compute.data.tokenized`)."""
LORA_TEXT_SIZE = {"rank": 4, "batch_size": 8, "rounds": 2, "inner_steps": 20}
"""The LoRA task `task submit --data --model lora-text` builds (`compute.spec.lora_text_spec`, the settings
`benchmarks.finetune` measures), at the localnet demo's size (`--rounds` sets the rounds)."""
DATA_CODEC = "int8"
"""The update codec of that model: dense int8, a quarter of fp32 and trained like it. Top-k sparsification (the
example spec's `topk-int8`, made for models of millions of parameters) sends a few of a small model's
coordinates per round, and the MLP of a few columns' CSV it starves stays at chance."""


@contextlib.contextmanager
def refusals():
    """A compute refusal (bad data, a blob that cannot be had) becomes the wallet's `Error: ...` exit."""
    try:
        yield
    except ComputeError as error:
        raise WalletError(str(error)) from None


def task_option(function):
    return click.option("--task", type=click.Choice(TASKS), default=CLASSIFICATION, show_default=True,
                        help="CSV: classification picks one of the label column's values; regression predicts the "
                             "label column as a number (trained on it standardized, reported in its own "
                             "units).")(function)


@click.group(cls=WalletGroup)
def data() -> None:
    """Pack your own data (CSV, JSONL, image folders) into a dataset, and serve it to a task's workers."""


@data.command("pack")
@click.argument("path", type=click.Path(path_type=pathlib.Path))
@click.option("--out", "-o", "out", type=click.Path(path_type=pathlib.Path), required=True,
              help="New directory for the packed dataset.")
@click.option("--label-column", default=None, help="CSV: the column holding the label (default: the last).")
@click.option("--test-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=DEFAULT_TEST_FRACTION, show_default=True, help="Share of each label held out for evaluation.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the held-out split.")
@click.option("--private/--public", default=True, show_default=True,
              help="--private (the default): encrypt the shards under a new data key kept in OUT/data.key, which "
                   "only the task's members and validators receive (docs/privacy.md); --public: shards in clear, "
                   "anyone who fetches them reads them.")
@click.option("--model", type=click.Choice(MODELS), default="mlp", show_default=True,
              help="The model the data is for: mlp and cnn read features (a text becomes hashed word counts); "
                   "lora-text fine-tunes all-MiniLM-L6-v2 on a .jsonl's texts, kept as its tokenizer's token ids.")
@click.option("--context", type=click.IntRange(min=1), default=None,
              help=f"With --model lora-text: tokens per text, longer ones cut, shorter padded [default: "
                   f"{DEFAULT_CONTEXT}].")
@click.option("--keep-columns", default="", help="CSV: comma-separated columns to keep even if they look like ids "
                                                   "(unique per row), which are otherwise left out.")
@task_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (-o names the directory here).")
def pack(path: pathlib.Path, out: pathlib.Path, label_column: str | None, test_fraction: float, seed: int,
         private: bool, model: str, context: int | None, keep_columns: str, task: str, as_json: bool) -> None:
    """Pack PATH (a .csv with a header, a .jsonl of {"text", "label"}, or a folder with one folder of images per
    class) into content-addressed shards and a manifest in the new directory OUT, encrypted unless --public."""
    with refusals():
        key = new_data_key() if private else None
        kept = tuple(name.strip() for name in keep_columns.split(",") if name.strip())
        blobs, labels, source_format = pack_file(path, model, label_column, context, test_fraction, seed, key, kept,
                                                 task)
        packed = write_packed(blobs, labels, source_format, out, key)
    emit(packed.summary(), as_json, print_pack_summary)


def print_pack_summary(summary: dict) -> None:
    """The summary's fields, and for a CSV a table of what was done to each column."""
    columns = summary.get("columns", [])
    shown = {**summary, **({"target": "{column} (standardized: mean {mean:.6g}, scale {scale:.6g})".format(
        **summary["target"])} if "target" in summary else {})}
    print_key_values([(name, value) for name, value in shown.items() if name not in ("columns", "hint")],
                     title="Packed")
    if columns:
        print_table(["column", "kind", "done", "features", "imputed"],
                    [[c["column"], c["kind"], c["done"], c["features"], c["imputed"]] for c in columns],
                    title="Columns (statistics from the train split)")
    if summary.get("hint"):
        click.echo(f"Hint: {summary['hint']}", err=True)


@data.command("serve")
@click.argument("directory", type=click.Path(file_okay=False, path_type=pathlib.Path))
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="host:port to serve on (port 0: any free one).")
@output_option
def serve(directory: pathlib.Path, listen: str) -> None:
    """Serve the packed DIRECTORY's blobs (read-only) until interrupted."""
    with refusals():
        packed = open_packed(directory)
        host, port = parse_listen(listen)
        with served(packed, host, port) as server:
            emit({"url": server.url, **packed.summary()}, settings().json,
                 lambda answer: print_key_values(answer.items(), title="Serving (Ctrl-C stops)", err=True))
            wait_for_interrupt()


def wait_for_interrupt() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise WalletError(f"--listen must be host:port, got {text!r}")
    return host, int(port)


@contextlib.contextmanager
def served(packed: PackedDataset, host: str, port: int):
    try:
        server = ServingThread(packed.store, host, port).start()
    except OSError as error:
        raise WalletError(f"cannot serve on {host}:{port}: {error.strerror or error}") from None
    try:
        yield server
    finally:
        server.stop()


@dataclasses.dataclass
class DataSubmission:
    """What `task submit --data` submits: the spec built around the packed data, and the server (if any)
    that serves the data while the task runs (the wallet's `requester.follow_task` keeps it up till the end)."""

    spec: bytes
    packed: PackedDataset
    urls: list[str]
    server: ServingThread | None
    budget: Budget | None = None
    """The task's length in epochs over the packed train split."""

    @property
    def data_key(self) -> bytes | None:
        """This task's own data key (`for_one_task`); None for public data."""
        return self.packed.key

    @property
    def data_key_hash(self) -> bytes:
        """The commitment the task makes to its private data's key (this task's own, `for_one_task`); b"" for
        public data."""
        key = self.packed.key
        return b"" if key is None else data_key_hash(key)

    def plan_rows(self, plan) -> list[tuple[str, object]]:
        """What the plan adds for data (`wallet.cli.task.submit_order`): the epochs, and the cost of one (the
        wallet's `TaskPlan.cost` over the epochs, in whole utrl)."""
        budget = self.budget
        if budget is None:
            return []
        per_epoch = plan.cost * budget.train_samples // (budget.steps * budget.batch_size)
        return [("epochs", budget.describe()), ("cost per epoch", amount_text(per_epoch))]

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def packed_for(path: pathlib.Path, label_column: str | None, model: str, private: bool = True,
               task: str | None = None) -> PackedDataset:
    """PATH if it is a packed directory (private or not as it was packed), else PATH packed for `model`,
    encrypted under a new data key unless not `private`, into `<PATH>.packed` (reused when it holds the same
    data: packed again under the data key it keeps, if any, the manifest hash is the same; refused when it holds
    other data, or is public where private was asked or the other way round). `task` (classification when None)
    is what a file is packed for; a packed directory keeps its own, and is refused when `task` names another."""
    if (path / SUMMARY_FILE).exists():
        packed = open_packed(path)
        if task is not None and task != packed.task:
            raise WalletError(f"{path} is packed for {packed.task}, not {task}: pack the file again with --task {task}")
        return packed
    target = path.with_name(path.name + ".packed")
    existing = open_packed(target) if target.exists() else None
    if existing is not None and (existing.key is not None) != private:
        held, other = ("private", "--private") if existing.key is not None else ("public", "--public")
        raise WalletError(f"{target} holds a {held} pack of this data: remove it to pack it again, or pass {other}")
    key = existing.key if existing is not None else new_data_key() if private else None
    blobs, labels, source_format = pack_file(path, model, label_column, key=key, task=task or CLASSIFICATION)
    if existing is not None:
        if existing.manifest_hash != blobs.manifest_hash:
            raise WalletError(f"{target} holds other data: remove it or pass a packed directory with --data")
        return existing
    return write_packed(blobs, labels, source_format, target, key)


def model_for(packed: PackedDataset, model: str | None) -> str:
    """The architecture to train on `packed`: `model`, or by default the one its samples are for (lora-text for
    token ids, else mlp); refused where they do not fit."""
    packed_for_lora = packed.context > 0
    if model is None:
        return LORA_TEXT if packed_for_lora else "mlp"
    if packed_for_lora and model != LORA_TEXT:
        raise WalletError(f"{packed.directory} holds token ids, packed for --model {LORA_TEXT}: {model} reads "
                          f"features (pack the texts again without --model {LORA_TEXT})")
    if model == LORA_TEXT and not packed_for_lora:
        raise WalletError(f"{packed.directory} holds features, not texts packed for {LORA_TEXT}: pack a .jsonl of "
                          f"texts with `trolly-wallet data pack --model {LORA_TEXT}`")
    return model


def default_spec(packed: PackedDataset, model: str, epochs: float | None = None, rounds: int | None = None) -> dict:
    """The spec `task submit --data` builds without a spec file: `model` sized to the data, trained for `epochs`
    (by default as many as `budget.budget_for` gives the data) over `rounds` (by default the budget's); its
    dataset section is set by the caller."""
    if model == LORA_TEXT:
        return sized(lora_text_spec(packed.manifest_hash, **LORA_TEXT_SIZE), packed.train_samples, epochs, rounds)
    training = MODEL_TRAINING[model]
    budget = budget_for(packed.train_samples, training.batch_size, epochs, rounds, training)
    return table_spec(packed.manifest_hash, model, MODEL_CONFIGS[model], budget, DATA_CODEC, training)


def sized(document: dict, train_samples: int, epochs: float | None, rounds: int | None) -> dict:
    """A spec document (a file's, or lora-text's) with its rounds and inner steps set to train `epochs` at its
    batch size over `rounds` rounds (the budget's without it); without `epochs`, only its rounds set."""
    training = document["training"]
    if epochs is not None:
        budget = budget_for(train_samples, training["batch_size"], epochs, rounds,
                            checkpoint_every=training["checkpoint_every"])
        training.update(rounds=budget.rounds, inner_steps=budget.inner_steps)
    elif rounds is not None:
        training.update(rounds=rounds)
    return document


def prepare_data_submission(path: str, spec_file: str | None, model: str | None, rounds: int | None,
                            urls: tuple[str, ...], listen: str, label_column: str | None,
                            private: bool = True, task: str | None = None,
                            epochs: float | None = None) -> DataSubmission:
    """Pack (if needed, for `model`, encrypted unless not `private`; a CSV for `task`, classification when None),
    build the spec: the spec file's with its dataset replaced, or `model` (by default the one the data is packed
    for) sized to the data, either trained for `epochs` (`sized`, `default_spec`), and start serving (unless
    `urls` say where the data is served)."""
    with refusals():
        packed = packed_for(pathlib.Path(path), label_column, model or "mlp", private, task)
        if spec_file is not None:
            try:
                document = sized(json.loads(pathlib.Path(spec_file).read_bytes()), packed.train_samples, epochs,
                                 rounds)
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise WalletError(f"cannot read the spec {spec_file}: {error!r} (it needs a training section with "
                                  f"rounds, batch_size and checkpoint_every)") from None
        else:
            document = default_spec(packed, model_for(packed, model), epochs, rounds)
        packed = for_one_task(packed)  # a private pack: this task's own copy, under a key drawn for it
        server = None
        if not urls:
            host, port = parse_listen(listen)
            try:
                server = ServingThread(packed.store, host, port).start()
            except OSError as error:
                raise WalletError(f"cannot serve the data on {listen}: {error.strerror or error}") from None
            urls = (server.url,)
        document["dataset"] = packed.spec_dataset(list(urls))
        spec = json.dumps(document, indent=2).encode()
        try:
            validate_spec(spec, parse_spec(spec).training.rounds)
        except (ChainError, ComputeError) as error:
            if server is not None:
                server.stop()
            raise WalletError(f"the spec for this data is not valid: {error}") from None
        return DataSubmission(spec, packed, list(urls), server, budget_of(document["training"], packed.train_samples))


def packed_dataset_of(packed: PackedDataset, manifest_hash: str) -> Dataset:
    """The task's dataset from the requester's packed directory: the task's own re-encrypted copy when the pack
    made one (`task_copy`), else the pack as it is (which `evaluate_result` refuses if it is not the task's)."""
    return (task_copy(packed, manifest_hash) or packed).load()


def addresses_option(function):
    return click.option("--allow-private-addresses", is_flag=True, envvar=PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE,
                        help=f"Fetch from private and loopback addresses too: a localnet's workers (env "
                             f"${PRIVATE_ADDRESSES_ENVIRONMENT_VARIABLE}, which `trolly-localnet up` prints "
                             f"set).")(function)


@click.command("fetch")
@click.argument("task_id", type=click.IntRange(min=1))
@click.option("--out", "-o", "out", type=click.Path(path_type=pathlib.Path), required=True,
              help="New directory for model.safetensors, spec.json, labels.json and a table's preprocessing.json.")
@click.option("--data", "data_directory", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              help="Your packed dataset: a private table's preprocessing is read from it (needed for private data).")
@click.option("--onnx", is_flag=True, help="Also write model.onnx (an mlp; it reads preprocessed features).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (-o names the directory here).")
@addresses_option
@node_options
def fetch(task_id: int, out: pathlib.Path, data_directory: pathlib.Path | None, onnx: bool, as_json: bool,
          allow_private_addresses: bool) -> None:
    """Download TASK_ID's final weights by the chain's final weights hash, check them against the chain and the
    spec, and write them as safetensors with the spec, the label names and a table's preprocessing (what
    `trolly-wallet model predict` applies to raw rows) into OUT."""
    client = settings().client()
    addresses = AddressPolicy(allow_private_addresses)
    with refusals():
        result = client.run(fetch_result(client.async_client, task_id, addresses))
        packed = None if data_directory is None else open_packed(data_directory)
        files = write_result(result, out, client.run(result_files(result, addresses, packed, onnx)))
    emit({**result.summary(), "directory": str(out), "files": files}, as_json,
         lambda summary: print_key_values(summary.items(), title=f"Task {task_id}: the result"))


@click.command("eval")
@click.argument("task_id", type=click.IntRange(min=1))
@click.option("--data", "data_directory", type=click.Path(file_okay=False, path_type=pathlib.Path), default=None,
              help="Your packed dataset (else the dataset is fetched from the spec's and the members' URLs).")
@addresses_option
@node_options
@output_option
def evaluate_command(task_id: int, data_directory: pathlib.Path | None, allow_private_addresses: bool) -> None:
    """Evaluate TASK_ID's final weights on its dataset's held-out split: accuracy and loss, or for regression
    the loss beside R^2, MAE and RMSE in the target's own units."""
    client = settings().client()
    addresses = AddressPolicy(allow_private_addresses)
    with refusals():
        result = client.run(fetch_result(client.async_client, task_id, addresses))
        packed = open_packed(data_directory) if data_directory is not None else None
        try:
            dataset = (packed_dataset_of(packed, result.spec.dataset.manifest_hash)
                       if packed is not None else client.run(fetch_dataset_of(result, addresses)))
        except DataKeyError:
            raise WalletError("the task's dataset is private: pass your packed directory (which keeps its data "
                              "key) with --data") from None
        target = None  # a regression's target statistics, to report in its own units (`metrics.py`)
        if result.shape.kind == REGRESSION:
            target = packed.target if packed is not None else client.run(
                fetch_target(result.spec, [*result.spec.dataset.urls, *result.urls], addresses))
        answer = evaluate_result(result, dataset, target)
    emit(answer, settings().json, lambda a: print_key_values(a.items(), title=f"Task {task_id} on its held-out split"))
