"""What every command line over the wallet shares: its options and per-command settings (`options.py`), its
output (`output.py`) and its one way to fail (`errors.py`).

Below both `wallet/cli/` (the `trolly-wallet` groups) and the requester's commands it loads by name from
`compute/requester/cli.py`, so the commands loaded lazily import nothing of the wallet CLI that names them
(tests/project/test_import_direction.py).
"""
