"""The one place where the chain's error tree becomes ABCI `(code, codespace, log)`.

Every `trolly.chain.errors.ChainError` subclass carries a stable `code` within its `codespace`; this module
reads them off and nothing else in the node invents codes. Code 0 is success, as in CometBFT. Anything that
is not a `ChainError` is a bug and is never mapped here: the server answers it with an ABCI `exception`.
"""

from __future__ import annotations

from dataclasses import dataclass

from trolly.chain.errors import ChainError

OK = 0
"""The ABCI code of success."""


@dataclass(frozen=True)
class ErrorCode:
    code: int
    codespace: str
    log: str


def error_code(error: ChainError) -> ErrorCode:
    """The ABCI triple for an expected failure: stable code, its codespace, a readable log."""
    if not isinstance(error, ChainError):
        raise TypeError(f"only ChainErrors have ABCI codes, got {type(error).__name__}")
    code = int(error.code)
    if code == OK:
        raise ValueError(f"{type(error).__name__} declares code 0, which means success")
    return ErrorCode(code, error.codespace, error.log)


def registered_codes() -> dict[tuple[str, int], type[ChainError]]:
    """Every ChainError class defined so far by (codespace, code); raises if two share one.

    Used by the tests so that a module adding errors cannot silently reuse a code clients match on.
    """
    seen: dict[tuple[str, int], type[ChainError]] = {}
    pending = [ChainError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        slot = (cls.codespace, cls.code)
        # A subclass that only inherits its parent's code (no own `code`) refines the message, not the code.
        if "code" not in vars(cls) and cls is not ChainError:
            continue
        if slot in seen and seen[slot] is not cls:
            raise ValueError(f"{cls.__name__} and {seen[slot].__name__} share code {slot[1]} in {slot[0]!r}")
        seen[slot] = cls
    return seen
