"""The solo engine: a single-validator block producer that stands in for CometBFT v0.38.

Where no `cometbft` binary exists, this package drives the Trolly application through the very same ABCI
socket CometBFT would use (four connections, handshake with Info and replay, InitChain, PrepareProposal,
ProcessProposal, FinalizeBlock, Commit, CheckTx and re-check) and serves the part of CometBFT's JSON-RPC
and websocket API that the clients use, with CometBFT's encodings. One validator, no Byzantine fault
tolerance: it is for development, tests and demos.

Parts, each a small module:
    abci_client   the four ABCI connections (uvarint-framed protobuf over TCP or a unix socket)
    hashing       block, data, validator-set and results hashes (RFC 6962 Merkle trees)
    chainstate    genesis to InitChain, consensus params, validator sets and their updates
    blockstore    the engine's own LevelDB: blocks, FinalizeBlock results, tx and event indexes
    mempool       transactions admitted by CheckTx, waiting for a block
    blocks        building a block: last commit, header, block id; the events a block publishes
    producer      the handshake and the block loop
    event_bus     the event bus behind websocket subscriptions and broadcast_tx_commit
    event_query   CometBFT's event query language (tx_search, subscribe)
    rpc_encoding  CometBFT JSON shapes for blocks, results, validators
    rpc_methods   the JSON-RPC methods
    rpc_server    JSON-RPC over HTTP (GET and POST) and the websocket
    node          the service that runs all of it
"""

from ..errors import AbciAppError


class EngineError(AbciAppError):
    """Base of every failure of the solo engine (bad home, app out of step with the block store, ...)."""


class AppConnectionLost(EngineError):
    """The ABCI connection to the application closed or failed; the engine reconnects and re-handshakes."""


class HandshakeError(EngineError):
    """The application's state cannot be reconciled with the engine's block store (app ahead, hash mismatch)."""
