"""What the staking module answers at `/validators`, as a typed view (read like the market's, `market_answers.py`).

The console's network page shows each validator's stake, power and whether it is jailed: CometBFT's own
`validators` RPC knows only consensus keys and power, so the staking answer is read here, once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .market_answers import Address, parse_answer, plain
from .rpc import AsyncRpcClient


@dataclasses.dataclass(frozen=True)
class ValidatorView:
    """One validator as the staking module answers it."""

    operator: Address
    consensus_pubkey: str
    """Base64 of the ed25519 consensus key."""
    consensus_address: str
    """Upper-case hex, as CometBFT names the validator in blocks and votes."""
    stake: int
    power: int
    """Consensus power: 0 while jailed or below the minimum self-stake."""
    moniker: str
    jailed: bool

    def to_answer(self) -> dict:
        return plain(self)


def read_validators(answer: Any) -> tuple[ValidatorView, ...]:
    if not isinstance(answer, list):
        answer = [answer]  # parse_answer names what is wrong with a value that is not a list of objects
    return tuple(parse_answer(ValidatorView, item, f"/validators[{i}]") for i, item in enumerate(answer))


async def get_validators(client: AsyncRpcClient) -> tuple[ValidatorView, ...]:
    """Every validator the staking module knows, jailed ones included."""
    return read_validators(await client.query_json("/validators") or [])
