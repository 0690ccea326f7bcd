"""Printing results: rich tables for people, JSON with stable (sorted) keys for scripts.

Commands build one JSON-able dict or list and hand it to `emit` with a function that renders it as text; so
the JSON output is always complete and the text output is only a view of it.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Iterable

import click
from rich.console import Console
from rich.table import Table

from ..amounts import format_amount_both


def console(err: bool = False) -> Console:
    stream = sys.stderr if err else sys.stdout
    # Off a terminal rich assumes 80 columns and would fold addresses and hashes; give it room instead.
    return Console(file=stream, width=None if stream.isatty() else 200, highlight=False, soft_wrap=False)


def emit(data: Any, as_json: bool, render_text: Callable[[Any], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, sort_keys=True, indent=2))
    else:
        render_text(data)


def key_value_table(rows: Iterable[tuple[str, Any]], title: str | None = None) -> Table:
    table = Table(title=title, show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def print_key_values(rows: Iterable[tuple[str, Any]], title: str | None = None, err: bool = False) -> None:
    console(err).print(key_value_table(rows, title))


def print_table(columns: list[str], rows: list[list[Any]], title: str | None = None, empty: str = "") -> None:
    if not rows and empty:
        console().print(empty)
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    console().print(table)


def amount_text(utrl: int) -> str:
    return format_amount_both(utrl)


def proof_text(proof: dict) -> str:
    """`proved at height H` and against what, for the text output."""
    return (f"{proof['note']} (app hash {proof['app_hash']} of block {proof['header_height']}"
            f"{'' if proof['present'] else ', proven absent'})")


def print_proof(proof: dict) -> None:
    """The proof line under a table: what it was proved at and against."""
    console().print(f"proof: {proof_text(proof)}")
