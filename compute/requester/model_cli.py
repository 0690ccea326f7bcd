"""`trolly-wallet model predict`: a model `task fetch` wrote, answering raw rows of a table.

Registered by name in the wallet (`trolly.wallet.cli.COMMAND_GROUPS`) and imported only when used, like `data`;
a thin call into `prediction.py`. Every answer is computed before anything is printed, so a refusal prints
`Error: ...` (naming the line or the columns), exits non-zero, and nothing else.
"""

from __future__ import annotations

import csv
import io
import json
import pathlib

import click

from trolly.wallet.command_line.errors import WalletGroup
from trolly.wallet.command_line.output import print_table

from .cli import refusals
from .prediction import load_fetched, predict

FIELDS = ("line", "label", "probability")
REGRESSION_FIELDS = ("line", "value")


@click.group(cls=WalletGroup)
def model() -> None:
    """Use a model `trolly-wallet task fetch` wrote."""


@model.command("predict")
@click.argument("directory", type=click.Path(file_okay=False, path_type=pathlib.Path))
@click.argument("rows", type=click.Path(dir_okay=False, path_type=pathlib.Path))
@click.option("--output", "-o", type=click.Choice(["text", "json", "csv"]), default="text", show_default=True,
              help="text: a table; json: a list of {line, label, probability} ({line, value} for a regression "
                   "model); csv: the same columns.")
def predict_command(directory: pathlib.Path, rows: pathlib.Path, output: str) -> None:
    """Answer each row of ROWS (a CSV with the columns of the table the task trained on; its label column may be
    there and is ignored) with the model fetched into DIRECTORY: the most probable label and its probability, or
    for a regression model the predicted value in the target column's units. The rows go through the task's preprocessing (DIRECTORY/preprocessing.json) first, as the training rows did."""
    with refusals():
        fetched = load_fetched(directory)
        answered = predict(fetched, rows)
    fields = FIELDS if fetched.preprocessing.target is None else REGRESSION_FIELDS
    if output == "json":
        click.echo(json.dumps(answered, indent=2))
    elif output == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(answered)
        click.echo(buffer.getvalue(), nl=False)
    else:
        cells = ([[a["line"], a["label"], f"{a['probability']:.4f}"] for a in answered] if fields == FIELDS
                 else [[a["line"], f"{a['value']:.6g}"] for a in answered])
        print_table(list(fields), cells, title=f"Predictions of {directory}")
