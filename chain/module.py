"""What a module contributes to the chain, and the routes the core dispatches through.

The core (`app.py`) knows nothing of banks, validators or tasks: it walks `MODULES`, a tuple of `Module`
values, for message routes, queries, begin/end-block hooks, genesis and invariants. Adding a module (the task
market, for one) means writing its files and adding it to that tuple; nothing in the core changes.

Message handlers come in pairs: `validate_<kind>(msg)` is stateless (checked in CheckTx, ProcessProposal and
execution) and `process_<kind>(state, ctx, signer, msg)` changes state, raising a `ChainError` to fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from google.protobuf.message import Message

from .block import BlockContext
from .state import State

Validate = Callable[[Any], None]
Process = Callable[[State, BlockContext, bytes, Any], None]


@dataclass(frozen=True)
class MessageRoute:
    message_type: type[Message]
    validate: Validate
    process: Process

    @property
    def type_url(self) -> str:
        return "/" + self.message_type.DESCRIPTOR.full_name


@dataclass(frozen=True)
class QueryResult:
    """A query answer: a JSON-able value, and the state key whose Merkle proof backs it (if any)."""

    value: Any
    proof_key: bytes | None = None


@dataclass(frozen=True)
class QueryRoute:
    """Serves `path` exactly, and `path/<arg>` with `arg` passed to the handler ('' when absent)."""

    path: str
    handler: Callable[[State, str, bytes], QueryResult]
    description: str = ""


@dataclass(frozen=True)
class Module:
    name: str
    messages: tuple[MessageRoute, ...] = ()
    queries: tuple[QueryRoute, ...] = ()
    params: tuple[type, ...] = ()
    init_genesis: Callable[[State, BlockContext, dict], None] | None = None
    begin_block: Callable[[State, BlockContext], None] | None = None
    end_block: Callable[[State, BlockContext], None] | None = None
    invariants: tuple[Callable[[State], None], ...] = field(default=())


class InvariantBroken(AssertionError):
    """An invariant does not hold: a bug in the state machine, never a client error."""
