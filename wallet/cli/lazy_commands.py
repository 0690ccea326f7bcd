"""Commands registered by name and imported on first use.

A command group or command named here as "module:attribute" is imported only when it runs, so `trolly-wallet
keys` never loads the network stack, and the requester's commands that need torch and the blob service
(`data`, `task fetch`, `task eval`, `task submit --data`, all in `trolly.compute.requester.cli`, and
`model predict`, in `trolly.compute.requester.model_cli`) are loaded
only by those commands. Those are the wallet's only references to `compute`, a package above it: they are
strings, not imports, and tests/project/test_import_direction.py lists them as its one documented exception.
"""

from __future__ import annotations

import importlib


def load_target(target: str):
    """The attribute named by "module:attribute", its module imported now."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
