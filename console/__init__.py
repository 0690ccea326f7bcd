"""`trolly-console`: a local web app (127.0.0.1 only) over a node's RPC, for people who will not use a terminal.

Its script (`entry.py`) pins the instruction set, as every entry point that may train does, and then runs the
command (`cli.py`). It starts without torch: a page that needs the compute library (a chart, a spec, an
upload packed) imports it when first used, and the preflight and the local worker run as child processes.

The server (`server.py`) reads the chain through the wallet's RPC client and typed views (`chain_reads.py`),
watches the node for the pages' live updates (`node_watch.py`), answers only sessions its access token opened
(`access.py`), guards every request and every state change (`security.py`) and
serves the front end that `make setup` builds from `console/web/` with npm. Each page that acts has its API in
a module of its own: `new_task_api.py` (uploads packed by `uploads.py`, templates in `templates.py`, the data
served by `task_following.py`), `wallet_api.py`, `compute_api.py` (a local worker, `worker_process.py`),
`gov_api.py` (proposals, tallies, votes and deposits); the task page's chart is `round_charts.py`'s background
job; signing is `signing.py`'s, with the keys of the wallet home in `config.py`.
"""
