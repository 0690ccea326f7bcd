"""A stand-in CometBFT RPC for `trolly-node init --state-sync` tests: serves canned /status, /commit and /genesis
answers over real HTTP on a loopback port, so the command is tested as it talks to real nodes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def node_answers(chain_id: str, latest: int, hashes: dict[int, str], node_id: str, p2p_port: int,
                 genesis: dict | None = None) -> dict:
    return {"chain_id": chain_id, "latest": latest, "hashes": hashes, "node_id": node_id, "p2p_port": p2p_port,
            "genesis": genesis or {"chain_id": chain_id, "genesis_time": "2024-01-01T00:00:00Z",
                                   "consensus_params": {}, "validators": [], "app_state": {}}}


class FakeRpc:
    def __init__(self, answers: dict) -> None:
        self.answers = answers
        handler = type("Handler", (_Handler,), {"answers": answers})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    answers: dict

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        path, _, query = self.path.lstrip("/").partition("?")
        a = self.answers
        if path == "status":
            result = {"node_info": {"network": a["chain_id"], "id": a["node_id"],
                                    "listen_addr": f"tcp://0.0.0.0:{a['p2p_port']}"},
                      "sync_info": {"latest_block_height": str(a["latest"])}}
        elif path == "commit":
            height = int(query.split("=")[1])
            result = {"signed_header": {"commit": {"block_id": {"hash": a["hashes"][height]}}}}
        elif path == "genesis":
            result = {"genesis": a["genesis"]}
        else:
            self.send_error(404)
            return
        body = json.dumps({"jsonrpc": "2.0", "id": -1, "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass
