"""What a requester does with the compute library: pack its own data, serve it, fetch and evaluate the result,
and have the fetched model answer raw rows.

The `trolly-wallet data` and `model` groups and the `task fetch` / `task eval` commands (and `task submit --data`)
live here because they need torch and the blob service; the wallet registers them by name and imports them on
first use, so `trolly-wallet keys` and the other wallet commands never load them (tests/project/test_import_direction.py).
"""
