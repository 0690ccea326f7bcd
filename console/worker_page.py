"""The browser worker's page, served by the console (docs/browser-worker.md):

    GET /worker?node=...&relay=...      sends the browser on to /worker/ with the same query
    GET /worker/                        the page (dist/worker/worker.html)
    GET /worker/<file>                  its bundle, its Web Worker and the kernel's .wasm (dist/worker/)

Like every page of the console it is reached through the console's access token: the address a localnet prints
(`/worker?token=...&node=...&relay=...`) opens a session, and `security.py`'s guard refuses the page and its files
to a browser without one. The page itself holds no secret of the console and calls none of its API: it talks to
the node, the relay and the blob services named in its address, from the browser, cross-origin (each answers
CORS for it: docs/browser-worker.md), so the same files work from any static server too.
"""

from __future__ import annotations

import pathlib

from aiohttp import web

PAGE = "worker.html"


def add_routes(app: web.Application, dist: pathlib.Path) -> None:
    """The page's routes over `dist/worker` (built by `make setup`; a 503 saying so while it is not)."""
    files = dist / "worker"

    async def to_the_page(request: web.Request) -> web.Response:
        raise web.HTTPSeeOther(request.rel_url.with_path("/worker/").with_query(request.query))

    async def page(request: web.Request) -> web.Response:
        if not (files / PAGE).exists():
            return web.Response(status=503, content_type="text/plain", text="The browser worker's page is not built: "
                                "run `make setup` (it needs Node.js and npm).")
        return web.FileResponse(files / PAGE, headers={"Cache-Control": "no-store"})

    app.router.add_get("/worker", to_the_page)
    app.router.add_get("/worker/", page)
    if files.is_dir():
        app.router.add_static("/worker/", files)
