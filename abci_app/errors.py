"""The base of every exception the node side (`trolly.abci_app`) raises on purpose.

Chain rule failures are `trolly.chain.errors.ChainError`s; this tree is for the node around it: framing of
the ABCI socket, the server, the store, the engine and the CLI each subclass `AbciAppError`.
"""


class AbciAppError(Exception):
    """Base of the node's own expected failures."""
