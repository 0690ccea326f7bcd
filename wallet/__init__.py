"""trolly-wallet: keys, transactions and queries for Trolly, as a library first and a CLI second.

- `keyring`: named ed25519 keys on disk (encrypted `file` backend, unencrypted `test` backend).
- `amounts`: parsing and formatting of token amounts (`1.5trl`, `1500000utrl`).
- `txbuilder`: the messages a wallet sends and the signed transactions that carry them.
- `rpc`: the CometBFT JSON-RPC client (async, with a small sync facade) that the worker and verifier reuse.
- `proofs`: checking an account query's Merkle proof against a block header's app hash.
- `cli`: the `trolly-wallet` command, thin click groups over the modules above.

Every expected failure raises a subclass of `trolly.wallet.errors.WalletError`.
"""
