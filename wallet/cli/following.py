"""`task submit --data` after the task is included: the requester library's `follow_task`, rendered with rich on
stderr (stdout keeps the command's answer), until the task ends or Ctrl-C.

What the follow does (serve the data, deliver a private task's key, stop at the end) is `wallet/requester.py`'s;
this file only says it: the task's progress when it changes, each key delivery, each recipient that cannot be
keyed, each look that failed.
"""

from __future__ import annotations

import contextlib

from trolly.chain.crypto import PrivateKey

from ..command_line.options import settings
from ..command_line.output import console
from ..requester import (FollowEvent, KeylessRecipient, KeysDelivered, Looked, Serving, SubmittedTask, Trouble,
                         follow_task)


def follow_in_terminal(submitted: SubmittedTask, serving: Serving | None, data_key: bytes | None) -> None:
    """Follow the task just submitted while it lives: its data kept served (`serving`, if this command serves it)
    and, for private data, its key delivered; nothing to follow without either."""
    if serving is None and data_key is None:
        return
    task_id = submitted.task_id
    if serving is not None:
        say(f"Serving the data at {serving.url} until task {task_id} ends (Ctrl-C stops serving).")
    if data_key is not None:
        say(f"The data is private: its key (drawn for task {task_id} alone) goes to the task's members once it "
                  f"starts and to each validator drawn to check it, until the task ends.")
    options = settings()
    client = options.client()
    requester: PrivateKey | None = submitted.requester if data_key is not None else None
    try:
        client.run(_render(follow_task(client.async_client, task_id, requester=requester, data_key=data_key,
                                       nonce_cache=options.nonce_cache(), serving=serving)))
    except KeyboardInterrupt:
        say("Stopped following the task; workers that still need the data fetch it from each other, and "
                  "nobody who joins from now on gets its key.")


async def _render(events) -> None:
    last_look = ""
    async with contextlib.aclosing(events):
        async for event in events:
            line = describe(event)
            if isinstance(event, Looked):
                if line == last_look:
                    continue
                last_look = line
            say(line, style="yellow" if isinstance(event, Trouble) else None)


def say(line: str, style: str | None = None) -> None:
    """A line on stderr as written (no markup read in it, never folded: scripts read the URL off it)."""
    console(err=True).print(line, style=style, markup=False, soft_wrap=True)


def describe(event: FollowEvent) -> str:
    """One line for a person; a look says the task's status and progress."""
    if isinstance(event, Looked):
        return f"Task {event.view.id}: {event.view.status}, {event.view.progress}"
    if isinstance(event, KeysDelivered):
        return "\n".join(f"Data key delivered to {recipient}." for recipient in event.recipients)
    if isinstance(event, KeylessRecipient):
        return (f"The chain holds no public key for {event.address} (it has signed no transaction and genesis names "
                f"none), so it cannot be given the data key (docs/privacy.md).")
    return event.message
