"""A test-only ABCI app process: the real Trolly application behind the real `AbciServer`, misbehaving on a
few marker transactions so tests can break the engine's mempool connection on demand.

    python tests/helpers/raising_app.py --home H --abci unix://PATH

- CheckTx of the raw bytes `raise-in-check-tx` raises: the server answers with an ABCI exception.
- CheckTx of the raw bytes `drop-the-connection` makes the server drop that connection without answering.
- A RECHECK of a signed send of exactly `RAISE_ON_RECHECK_AMOUNT` raises (its NEW CheckTx passes).

Everything else is the real application over the real socket.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from trolly.abci_app import home as homelib
from trolly.abci_app.application import TrollyApplication
from trolly.abci_app.proto.tendermint.abci import types_pb2
from trolly.abci_app.server import AbciServer
from trolly.abci_app.store import Store
from trolly.chain.proto.bank_pb2 import MsgSend
from trolly.chain.tx import decode_tx

RAISE_IN_CHECK_TX = b"raise-in-check-tx"
DROP_THE_CONNECTION = b"drop-the-connection"
RAISE_ON_RECHECK_AMOUNT = 666


def _sends_amount(tx: bytes, amount: int) -> bool:
    try:
        return any(MsgSend.FromString(message.value).amount == amount for message in decode_tx(tx).body.messages)
    except Exception:  # noqa: BLE001 - not a signed send
        return False


class RaisingApplication(TrollyApplication):
    def check_tx(self, request):
        if request.tx == RAISE_IN_CHECK_TX:
            raise RuntimeError("test app: raising on CheckTx as asked")
        if request.type == types_pb2.RECHECK and _sends_amount(request.tx, RAISE_ON_RECHECK_AMOUNT):
            raise RuntimeError("test app: raising on the RECHECK of a marked send")
        return super().check_tx(request)


class DroppingServer(AbciServer):
    def dispatch(self, name, case, request):
        if case == "check_tx" and request.check_tx.tx == DROP_THE_CONNECTION:
            raise ConnectionResetError("test app: dropping the connection as asked")
        return super().dispatch(name, case, request)


async def _serve(home: homelib.Home, address: str) -> None:
    store = Store(home.paths.application_db)
    server = DroppingServer(RaisingApplication(store, home.chain_id), address)
    try:
        await server.start()
        print(f"ABCI server listening on {server.bound_address}", flush=True)
        await server.serve_forever()
    finally:
        await server.stop()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--abci", required=True)
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(homelib.load_home(arguments.home), arguments.abci))


if __name__ == "__main__":
    main()
