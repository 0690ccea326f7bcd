"""Every storage key prefix of the state, in one place (like Cosmos `types/keys.go`).

A key is a one-byte prefix followed by the object's identifier. Modules build keys only through the
functions here, so two modules can never collide.
"""

ACCOUNT = b"\x01"  # + address(20) -> Account
PARAMS = b"\x02"  # -> canonical JSON of Params
SUPPLY = b"\x03"  # -> total supply (u64 big-endian)
CHAIN_META = b"\x04"  # + name -> chain metadata (chain id, ...)

# staking, distribution, slashing: 0x10..0x1f
VALIDATOR = b"\x10"  # + operator address(20) -> Validator
VALIDATOR_BY_CONS = b"\x11"  # + consensus address(20) -> operator address
UNBONDING = b"\x12"  # + maturity height(8) + operator(20) + seq(8) -> UnbondingEntry
VALIDATOR_POWER_LAST = b"\x13"  # + consensus address(20) -> last power sent to CometBFT

# task market: 0x20..0x3f (reserved for the market module)


def account_key(address: bytes) -> bytes:
    return ACCOUNT + address


def u64(value: int) -> bytes:
    """Big-endian 8 bytes, so that keys sort numerically."""
    return value.to_bytes(8, "big")
