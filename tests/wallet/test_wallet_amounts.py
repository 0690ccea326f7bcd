"""wallet.amounts: what people type, exactly as the chain counts it."""

import pytest
from hypothesis import given, strategies as st

from trolly.wallet.amounts import U64_MAX, format_amount, format_amount_both, parse_amount
from trolly.wallet.errors import InvalidAmountText


@pytest.mark.parametrize(
    "text, utrl",
    [
        ("1.5trl", 1_500_000),
        ("1500000utrl", 1_500_000),
        ("1500000", 1_500_000),
        ("0.000001trl", 1),
        ("2TRL", 2_000_000),
        (" 3 utrl ", 3),
        (".5trl", 500_000),
        ("1_000utrl", 1000),
        (str(U64_MAX), U64_MAX),
    ],
)
def test_parse_amount_accepts_the_documented_forms(text, utrl):
    assert parse_amount(text) == utrl


@pytest.mark.parametrize(
    "text, reason",
    [
        ("0.0000001trl", "at most 6 decimals"),
        ("-1", "negative"),
        ("-1trl", "negative"),
        ("1.5", "did you mean 1.5trl"),
        ("1.5utrl", "smallest unit"),
        (str(U64_MAX + 1), "64-bit"),
        ("18446744073709.551616trl", "64-bit"),
        ("0", "more than zero"),
        ("0trl", "more than zero"),
        ("", "write e.g."),
        ("1e6", "write e.g."),
        ("5btc", "unknown denomination"),
        ("trl", "write e.g."),
    ],
)
def test_parse_amount_refuses_bad_input_with_a_reason(text, reason):
    with pytest.raises(InvalidAmountText, match=reason):
        parse_amount(text)


def test_zero_is_allowed_only_when_asked_for():
    assert parse_amount("0", allow_zero=True) == 0


def test_format_amount_is_exact_and_drops_trailing_zeros():
    assert format_amount(1_500_000) == "1.5trl"
    assert format_amount(2_000_000) == "2trl"
    assert format_amount(1) == "0.000001trl"
    assert format_amount(0) == "0trl"
    assert format_amount_both(1_500_000) == "1.5trl (1500000utrl)"


@given(st.integers(min_value=1, max_value=U64_MAX))
def test_format_then_parse_round_trips_every_u64(utrl):
    assert parse_amount(format_amount(utrl)) == utrl
    assert parse_amount(f"{utrl}utrl") == utrl
