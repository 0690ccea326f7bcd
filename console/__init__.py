"""`trolly-console`: a local web app (127.0.0.1 only) over a node's RPC, for people who will not use a terminal.

The server (`server.py`) reads the chain through the wallet's RPC client and typed views (`chain_reads.py`),
watches the node for the pages' live updates (`node_watch.py`), guards every state change (`security.py`) and
serves the front end that `make setup` builds from `console/web/` with npm.
"""
