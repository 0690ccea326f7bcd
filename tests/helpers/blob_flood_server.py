"""A blob server in a process of its own with a low file limit, for the flood test (test_compute_blob_flood).

    python blob_flood_server.py <store directory> <file limit>

Lowers RLIMIT_NOFILE (soft) to the given limit, stores one blob, serves the store on 127.0.0.1 with the default
connection limits and prints one JSON line {"port", "digest", "total", "per_peer"}. Then, for each line
`put` on stdin, stores a fresh blob in its own store as a worker does (no HTTP) and prints `ok <digest>` or
`error <reason>`; `quit` (or the end of stdin) stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys

from trolly.compute.blobs import BlobServer, BlobStore


async def serve(directory: str) -> None:
    store = BlobStore(directory)
    digest = store.put(b"served while flooded")
    async with BlobServer(store) as server:
        print(json.dumps({"port": server.port, "digest": digest, "total": server.guard.total,
                          "per_peer": server.guard.per_peer}), flush=True)
        while (line := (await asyncio.to_thread(sys.stdin.readline)).strip()) not in ("quit", ""):
            try:
                written = store.put(os.urandom(4096))
            except OSError as error:
                print(f"error {error}", flush=True)
            else:
                print(f"ok {written} held={server.guard.held} refused={server.guard.refused}", flush=True)


if __name__ == "__main__":
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    asyncio.run(serve(sys.argv[1]))
