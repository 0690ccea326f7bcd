"""What the staking and distribution modules answer, as typed views (read like the market's, `market_answers.py`).

`/validators` and `/validator/<operator>`: each validator's stake, power, commission and whether it is jailed
(CometBFT's own `validators` RPC knows only consensus keys and power, so the staking answer is read here, once);
`/delegations/<delegator>`, `/unbonding/<delegator>` and `/rewards/<delegator>`: what an account delegated, has
on its way back and has earned; the downtime module's `/signing_info/<operator>`: a validator's liveness
(missed blocks of its window, jailed until, tombstoned). The CLI and the console read these views, never the raw
answers.
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
    commission_rate: int
    """Basis points of the validator's fee share paid to its operator before its delegators."""
    max_rate: int
    max_change_rate: int
    details: str

    def to_answer(self) -> dict:
        return plain(self)


@dataclasses.dataclass(frozen=True)
class ValidatorDetail(ValidatorView):
    """One validator as `/validator/<operator>` answers it: with its operator's self-bond and delegation count."""

    self_bond: int
    delegators: int


@dataclasses.dataclass(frozen=True)
class DelegationView:
    validator: Address
    shares: str
    """Decimal integer: shares outgrow 64 bits after heavy slashing."""
    amount: int
    """What the shares are worth now, in utrl."""


@dataclasses.dataclass(frozen=True)
class Delegations:
    delegator: Address
    delegations: tuple[DelegationView, ...]
    total: int

    def to_answer(self) -> dict:
        return plain(self)


@dataclasses.dataclass(frozen=True)
class UnbondingView:
    validator: Address
    amount: int
    initial_balance: int
    creation_height: int
    maturity_height: int


@dataclasses.dataclass(frozen=True)
class Unbondings:
    delegator: Address
    entries: tuple[UnbondingView, ...]
    total: int

    def to_answer(self) -> dict:
        return plain(self)


@dataclasses.dataclass(frozen=True)
class RewardView:
    validator: Address
    amount: int


@dataclasses.dataclass(frozen=True)
class Rewards:
    delegator: Address
    rewards: tuple[RewardView, ...]
    total: int

    def to_answer(self) -> dict:
        return plain(self)


def read_validators(answer: Any) -> tuple[ValidatorView, ...]:
    if not isinstance(answer, list):
        answer = [answer]  # parse_answer names what is wrong with a value that is not a list of objects
    return tuple(parse_answer(ValidatorView, item, f"/validators[{i}]") for i, item in enumerate(answer))


async def get_rewards(client: AsyncRpcClient, delegator: str, height: int = 0) -> Rewards:
    """`delegator`'s pending rewards, at `height` (0: the latest)."""
    return parse_answer(Rewards, await client.query_json(f"/rewards/{delegator}", height=height), "/rewards")


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
