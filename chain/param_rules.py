"""The rules that tie params of different sections together, checked wherever params are set.

Each section's own ranges live in its dataclass (`__post_init__`); a rule here reads several sections at once.
Genesis (`app.init_chain`) checks them on the genesis params, and governance on the params as they would be
after all of a proposal's changes, at submission and again when it is applied, so that no sequence of passed
proposals can leave the chain with params that break one. A rule takes the params by section type and raises
`InvalidRequest` saying what must hold and why.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .market.params import MarketParams, check_unbonding_outlasts_reveals
from .params import get_params
from .state import State
from .validators import StakingParams

ParamsByType = Mapping[type, Any]


def unbonding_outlasts_reveals(params: ParamsByType) -> None:
    """A lazy verifier's penalty is taken from what it unbonded since its vote, which must still be unbonding at
    its round's reveal deadline (`market.params.check_unbonding_outlasts_reveals`)."""
    check_unbonding_outlasts_reveals(params[MarketParams], params[StakingParams].unbonding_blocks)


CROSS_PARAM_RULES: tuple[Callable[[ParamsByType], None], ...] = (unbonding_outlasts_reveals,)
"""Every rule that reads more than one params section."""


def check_param_rules(params: ParamsByType) -> None:
    """Raise the first broken cross-section rule's `InvalidRequest`."""
    for rule in CROSS_PARAM_RULES:
        rule(params)


def current_params(state: State, param_types: tuple[type, ...]) -> dict[type, Any]:
    """Every section's params as they are in `state`."""
    return {params_type: get_params(state, params_type) for params_type in param_types}
