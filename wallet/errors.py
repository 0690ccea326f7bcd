"""The wallet's exception tree: every expected failure is a `WalletError` with a one-line message.

The CLI prints `Error: <message>` and exits with the class's `exit_code`, so scripts can tell failures apart
without parsing text. Codes are stable (documented in `trolly-wallet --help`):

    1 other wallet error      2 usage error (click)        3 node unreachable
    4 wrong password           5 unknown key name           6 invalid address
    7 invalid amount           8 insufficient funds         9 transaction rejected
    10 timeout waiting for inclusion                       11 proof verification failed
    12 RPC error from the node
"""

from __future__ import annotations


class WalletError(Exception):
    """Base of every expected wallet failure."""

    exit_code = 1


class KeyringError(WalletError):
    """The keyring cannot do what was asked (bad files, existing name, wrong backend)."""


class KeyExists(KeyringError):
    """A key with this name already exists."""


class KeyNotFound(KeyringError):
    """No key with this name in the keyring."""

    exit_code = 5

    def __init__(self, name: str, backend: str = "", hint: str = "") -> None:
        where = f" in the {backend} keyring" if backend else ""
        super().__init__(f"unknown key name {name!r}{where} ({hint or 'see `trolly-wallet keys list`'})")
        self.name = name


class WrongPassword(KeyringError):
    """The password does not decrypt the keyring (or the armor)."""

    exit_code = 4


class InvalidAddressText(WalletError):
    """Text that should be a `trolly1...` address is not one."""

    exit_code = 6


class InvalidAmountText(WalletError):
    """Text that should be an amount is not one (or is out of range)."""

    exit_code = 7


class InsufficientBalance(WalletError):
    """The account cannot pay for what it is asked to sign (checked before signing)."""

    exit_code = 8


class NodeUnreachable(WalletError):
    """No answer from the node's JSON-RPC endpoint."""

    exit_code = 3

    def __init__(self, url: str, reason: str = "") -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(f"node unreachable at {url}{detail}")
        self.url = url


class RpcError(WalletError):
    """The node answered with a JSON-RPC error object."""

    exit_code = 12

    def __init__(self, code: int, message: str, data: str = "") -> None:
        text = f"RPC error {code}: {message}" + (f" ({data})" if data else "")
        super().__init__(text)
        self.code = code
        self.message = message
        self.data = data


class QueryFailed(WalletError):
    """An ABCI query answered with a non-zero code."""

    exit_code = 12

    def __init__(self, path: str, code: int, codespace: str, log: str) -> None:
        super().__init__(f"query {path} failed with code {code} ({codespace}): {log}")
        self.path = path
        self.code = code
        self.codespace = codespace
        self.log = log


class TxRejected(WalletError):
    """The node refused the transaction (CheckTx) or executed it with a non-zero code (FinalizeBlock)."""

    exit_code = 9

    def __init__(self, code: int, codespace: str, log: str, tx_hash: str = "", height: int = 0) -> None:
        where = f" in block {height}" if height else ""
        super().__init__(f"transaction rejected{where} with code {code} ({codespace}): {log}")
        self.code = code
        self.codespace = codespace
        self.log = log
        self.tx_hash = tx_hash
        self.height = height


class InclusionTimeout(WalletError):
    """A broadcast transaction did not appear in a block in time."""

    exit_code = 10

    def __init__(self, tx_hash: str, timeout: float) -> None:
        super().__init__(f"timeout: tx {tx_hash} not included in a block after {timeout:g}s (it may still be)")
        self.tx_hash = tx_hash
        self.timeout = timeout


class ProofInvalid(WalletError):
    """A Merkle proof did not verify against the app hash."""

    exit_code = 11


class MarketAnswerError(WalletError):
    """A market query answered something this client does not understand: a missing field, a value of the wrong
    type or shape, a status it does not know (`trolly.wallet.market_views`)."""
