"""The browser worker's data modules (console/web/src/browser_worker/) run in Node.js from a Python test: a
script beside the test takes one JSON argument and prints one JSON line, which the test compares with what the
Python implementation makes of the same input ("shared test vectors").

Also a blob service that serves whatever bytes a test gives it under whatever hash (`ServedBlobs`): the real
one (`compute.blobs.server`) refuses to store a blob under another hash, and the hostile cases need exactly that.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
SCRIPTS = ROOT / "tests" / "console" / "browser_worker"
LIBSODIUM = ROOT / "console" / "web" / "node_modules" / "libsodium-wrappers-sumo"
SKIP_REASON = ("node is not installed (Debian's nodejs package)" if NODE is None else
               "console/web's npm packages are not installed (make setup runs npm ci)")
AVAILABLE = NODE is not None and LIBSODIUM.is_dir()


def run_script(name: str, argument: dict, timeout: float = 120) -> dict:
    """Run tests/console/browser_worker/<name> with `argument` as JSON; its JSON output."""
    done = subprocess.run([NODE, str(SCRIPTS / name), json.dumps(argument)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


class ServedBlobs:
    """GET /blobs/<name> answered from a dict (404 when absent) on 127.0.0.1, on a thread of its own."""

    def __init__(self, blobs: dict[str, bytes]) -> None:
        served = blobs

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                name = self.path.removeprefix("/blobs/")
                data = served.get(name) if self.path.startswith("/blobs/") else None
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="served-blobs", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ServedBlobs:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
