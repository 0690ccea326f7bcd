"""Running the browser worker's chain-facing JavaScript from pytest: a Node.js script beside the test reads JSON
on stdin and answers JSON on stdout (tests/console/browser_worker/)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from google.protobuf.message import Message

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "console" / "browser_worker"
NODE = shutil.which("node")
EXACT_LIMIT = 2**53


def run_node_script(name: str, payload: object, timeout: float = 120) -> dict:
    """Run tests/console/browser_worker/<name> from the repository root with `payload` on stdin; its JSON answer."""
    done = subprocess.run([NODE, str(SCRIPTS / name)], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def camel_case_fields(message: Message) -> dict:
    """The set fields of `message` as the JavaScript encoders take them: camelCase names, bytes as hex,
    integers beyond 2^53 as decimal text, sub-messages as objects."""
    fields = {}
    for descriptor, value in message.ListFields():
        name = descriptor.name.split("_")[0] + "".join(part.title() for part in descriptor.name.split("_")[1:])
        if isinstance(value, Message):
            value = camel_case_fields(value)
        elif isinstance(value, bytes):
            value = value.hex()
        elif isinstance(value, int) and not isinstance(value, bool) and value > EXACT_LIMIT:
            value = str(value)
        fields[name] = value
    return fields
