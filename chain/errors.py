"""One exception tree for every expected failure of the state machine.

Anything a client can cause (a bad signature, too little balance, an unknown message) raises a subclass of
`ChainError`. Each class carries its ABCI `code` and `codespace`; only the ABCI adapter turns them into
responses (`trolly.abci_app.codes`). Any other exception escaping `chain` is a bug and must not be swallowed.

Codes are stable: clients match on them. A module that adds errors uses its own codespace, so codes only need
to be unique within it.
"""


class ChainError(Exception):
    """Base of every expected, client-caused failure."""

    code = 1
    codespace = "trolly"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)

    @property
    def log(self) -> str:
        return str(self)


class TxDecodeError(ChainError):
    """The transaction bytes could not be decoded."""

    code = 2


class InvalidSignature(ChainError):
    """The signature does not verify against the public key and the signed bytes."""

    code = 3


class WrongChainId(ChainError):
    """The transaction was signed for another chain."""

    code = 4


class InvalidNonce(ChainError):
    """The nonce is not the account's next nonce (replayed or skipped)."""

    code = 5


class InsufficientFunds(ChainError):
    """The account balance does not cover the amount."""

    code = 6


class InvalidAmount(ChainError):
    """An amount is zero, negative or does not fit in 64 bits."""

    code = 7


class UnknownMessage(ChainError):
    """The message type is not known to this chain."""

    code = 8


class InvalidAddress(ChainError):
    """An address is malformed or has a bad checksum."""

    code = 9


class Unauthorized(ChainError):
    """The signer may not perform this action."""

    code = 10


class NotFound(ChainError):
    """The requested object does not exist."""

    code = 11


class InvalidRequest(ChainError):
    """The request is malformed."""

    code = 12


class InsufficientFee(ChainError):
    """The fee is below the chain's minimum."""

    code = 13


class TxTooLarge(ChainError):
    """The transaction exceeds the maximum size."""

    code = 14


class UnknownQueryPath(ChainError):
    """No query handler serves this path."""

    code = 15


class UnexpectedFailure(ChainError):
    """Checking or running a message raised something other than a ChainError: a bug the transaction's contents
    reached. The transaction fails like any other (its messages' writes rolled back, the fee kept when the ante
    checks had passed), so a hostile transaction can never stop a node; the node logs the bug in full."""

    code = 16

    @classmethod
    def from_exception(cls, exc: BaseException, where: str) -> "UnexpectedFailure":
        """The log names only the exception's type, never its message, which may differ between nodes."""
        failure = cls(f"{where} failed unexpectedly ({type(exc).__name__}); the transaction has no effect "
                      f"beyond its fee")
        failure.__cause__ = exc
        return failure


class InvalidBoxProof(ChainError):
    """A recipient's proof about a sealed box (`trolly.chain.box_proofs`) is malformed or does not verify: the
    shared secret it reveals is not the one its account key computes with that box's ephemeral key."""

    code = 17
