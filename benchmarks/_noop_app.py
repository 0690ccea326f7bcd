"""An ABCI application that does no work, served by Trolly's own ABCI server: the benchmark's floor.

    python -m benchmarks._noop_app --abci unix:///path/app.sock

`benchmarks.network_throughput` runs it as its `noop` network: 4 CometBFT validators exactly like the `trolly`
network's (same homes, same config.toml, the app in its own process over the same kind of socket), but the
application admits every transaction, executes none and always answers the same app hash. What that network
sustains is the most any app served out of process by this server can sustain on the machine: the cost of
CometBFT driving an app over a socket, plus the server's framing, with nothing of Trolly's state machine.
Against `kvstore` (in CometBFT's own process) it shows what the socket alone costs; against `trolly`, what
the state machine costs.

With `--signatures` (the benchmark's `sigcheck` network) it also does the one piece of work no validator may
skip: each transaction new to its mempool is decoded and its ed25519 signature checked (`chain.tx.decode_tx`,
`chain.crypto.verify_signature`, as Trolly's CheckTx does the first time it meets the bytes); re-checks, as
Trolly's memo of passed checks makes them, check nothing again. A transaction that fails is refused.

It is a benchmark instrument, never a chain: it keeps no state beyond the last height, so that CometBFT's
handshake after InitChain sees the height it expects.
"""

from __future__ import annotations

import argparse

from trolly.abci_app.base_application import BaseApplication, info_response
from trolly.abci_app.proto.tendermint.abci import types_pb2 as abci
from trolly.abci_app.server import run_until_signalled
from trolly.chain.crypto import verify_signature
from trolly.chain.errors import ChainError
from trolly.chain.tx import decode_tx, sign_bytes

APP_HASH = bytes(32)
"""The app hash of every height: there is no state to commit to."""


class NoopApplication(BaseApplication):
    """Accepts every transaction and every proposal; every transaction succeeds without running. With
    `signatures`, a transaction new to the mempool must decode and carry a valid signature. What it does not
    write here is `BaseApplication`'s default: proposals as the mempool orders them, no queries, no snapshots."""

    def __init__(self, signatures: bool = False) -> None:
        self.height = 0
        self.signatures = signatures

    def info(self, request: abci.RequestInfo) -> abci.ResponseInfo:
        return info_response(self.height, APP_HASH)

    def check_tx(self, request: abci.RequestCheckTx) -> abci.ResponseCheckTx:
        if self.signatures and request.type == abci.CheckTxType.NEW:
            try:
                tx = decode_tx(request.tx)
            except ChainError as error:
                return abci.ResponseCheckTx(code=1, log=str(error))
            if not verify_signature(tx.pubkey, sign_bytes(tx.body_bytes), tx.signature):
                return abci.ResponseCheckTx(code=1, log="bad signature")
        return abci.ResponseCheckTx(code=0)

    def init_chain(self, request: abci.RequestInitChain) -> abci.ResponseInitChain:
        return abci.ResponseInitChain(app_hash=APP_HASH)

    def finalize_block(self, request: abci.RequestFinalizeBlock) -> abci.ResponseFinalizeBlock:
        self.height = request.height
        response = abci.ResponseFinalizeBlock(app_hash=APP_HASH)
        for _ in request.txs:
            response.tx_results.add(code=0)
        return response


def main() -> None:
    import uvloop  # as `trolly-node start` serves the real app

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--abci", required=True, help="unix://path or tcp://host:port to listen on")
    parser.add_argument("--signatures", action="store_true", help="decode and check the signature of each new tx")
    arguments = parser.parse_args()
    uvloop.run(run_until_signalled(NoopApplication(arguments.signatures), arguments.abci))


if __name__ == "__main__":
    main()
