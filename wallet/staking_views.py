"""What the staking module answers at `/validators`, and the downtime module at `/signing_info/<operator>`, as
typed views (read like the market's, `market_answers.py`).

The console's network page shows each validator's stake, power and whether it is jailed: CometBFT's own
`validators` RPC knows only consensus keys and power, so the staking answer is read here, once. A validator's
liveness (missed blocks of its window, jailed until, tombstoned) is read here too.
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


@dataclasses.dataclass(frozen=True)
class SigningInfoView:
    """One validator's liveness as the downtime module answers it."""

    operator: Address
    consensus_address: str
    start_height: int
    """Height its current window started: it is judged only once a whole window has been counted since."""
    index_offset: int
    """Commits counted since `start_height`."""
    missed_blocks_counter: int
    """Commits of its window it was absent from; more than `max_missed_blocks` jails it."""
    max_missed_blocks: int
    signed_blocks_window: int
    jailed: bool
    jailed_until: int
    """First height at which MsgUnjail is accepted (0: never jailed for downtime)."""
    tombstoned: bool
    """Double-signed: jailed for good."""

    def to_answer(self) -> dict:
        return plain(self)


async def get_signing_info(client: AsyncRpcClient, operator: str) -> SigningInfoView:
    """The liveness of `operator`'s validator (a chain error if it operates none)."""
    return parse_answer(SigningInfoView, await client.query_json(f"/signing_info/{operator}"), "/signing_info")
