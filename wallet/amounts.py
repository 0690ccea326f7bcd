"""Token amounts as people type them, and as the chain counts them.

The chain counts only integers of the base denomination `utrl` (1 TRL = 1,000,000 utrl). People write
`1.5trl`, `1500000utrl`, or a plain integer (taken as utrl, as the chain does). Parsing is exact decimal
arithmetic on the digits (never floats), so `0.000001trl` is exactly 1 utrl and `0.0000001trl` is refused.
"""

from __future__ import annotations

import re

from .errors import InvalidAmountText

BASE_DENOM = "utrl"
DISPLAY_DENOM = "trl"
DECIMALS = 6
UTRL_PER_TRL = 10**DECIMALS
U64_MAX = (1 << 64) - 1

_AMOUNT = re.compile(r"^(?P<whole>\d*)(?:\.(?P<fraction>\d*))?\s*(?P<denom>[a-zA-Z]*)$")


def parse_amount(text: str, *, allow_zero: bool = False, what: str = "amount") -> int:
    """The number of utrl that `text` denotes; raises InvalidAmountText with a message saying why not."""
    original = text
    text = (text or "").strip().replace("_", "")
    if text.startswith("-"):
        raise InvalidAmountText(f"invalid {what} {original!r}: amounts cannot be negative")
    match = _AMOUNT.match(text)
    if not match or not (match["whole"] or match["fraction"]):
        raise InvalidAmountText(
            f"invalid {what} {original!r}: write e.g. 1.5trl, 1500000utrl or 1500000 (plain integers are utrl)"
        )
    whole, fraction, denom = match["whole"] or "0", match["fraction"], match["denom"].lower() or BASE_DENOM
    if denom == BASE_DENOM:
        if fraction is not None and not match["denom"]:
            raise InvalidAmountText(
                f"invalid {what} {original!r}: plain numbers are utrl, whole only; did you mean {text}trl?"
            )
        if fraction is not None:
            raise InvalidAmountText(f"invalid {what} {original!r}: utrl is the smallest unit, no decimals allowed")
        value = int(whole)
    elif denom == DISPLAY_DENOM:
        fraction = fraction or ""
        if len(fraction) > DECIMALS:
            raise InvalidAmountText(
                f"invalid {what} {original!r}: at most {DECIMALS} decimals (1 utrl = 0.000001 trl)"
            )
        value = int(whole) * UTRL_PER_TRL + int(fraction.ljust(DECIMALS, "0") or "0")
    else:
        raise InvalidAmountText(f"invalid {what} {original!r}: unknown denomination {denom!r} (use trl or utrl)")
    if value > U64_MAX:
        raise InvalidAmountText(f"invalid {what} {original!r}: more than a 64-bit integer of utrl ({U64_MAX})")
    if value == 0 and not allow_zero:
        raise InvalidAmountText(f"invalid {what} {original!r}: must be more than zero")
    return value


def format_amount(utrl: int) -> str:
    """`1500000` -> `1.5trl`; whole numbers keep no decimals (`2trl`), exact to the last utrl."""
    whole, fraction = divmod(int(utrl), UTRL_PER_TRL)
    if fraction == 0:
        return f"{whole}{DISPLAY_DENOM}"
    return f"{whole}.{str(fraction).rjust(DECIMALS, '0').rstrip('0')}{DISPLAY_DENOM}"


def format_amount_both(utrl: int) -> str:
    """`1.5trl (1500000utrl)`: the human figure with the exact one beside it."""
    return f"{format_amount(utrl)} ({utrl}{BASE_DENOM})"
