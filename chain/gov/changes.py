"""Parameter changes: what a proposal may change, and the params as they would be after all of its changes.

A change names a section and a key and carries an integer. It is checked three ways, on the params as they
would be after every change of the proposal at once (so two changes that only hold together are judged
together): the key exists and may be governed, the section's own ranges hold (its dataclass's
`__post_init__`), and every rule that ties sections together holds (`param_rules`). The same check runs at
submission and again when a passed proposal is applied, against the params of that moment: a proposal that
no longer fits (another one changed something meanwhile) fails whole and changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..codec import U64_MAX, JsonRejected, load_untrusted_json
from ..errors import InvalidRequest
from ..param_rules import check_param_rules, current_params
from ..params import params_from_json, params_to_json, set_params
from ..state import State
from .errors import InvalidParamValue, ParamNotGovernable, ParamRuleBroken, UnknownParam

Change = tuple[str, str, int]
"""(section, key, value) of one param change."""

NOT_GOVERNABLE: dict[tuple[str, str], str] = {
    ("staking", "power_reduction"): "every validator's stored power is its stake // power_reduction, recomputed "
                                    "only when its stake changes",
    ("staking", "min_self_stake"): "a validator's stored power and its place in the active set follow from "
                                   "min_self_stake, recomputed only when its stake changes",
    ("staking", "max_validators"): "the active set is filled only as validators join, so a smaller bound would "
                                   "leave more active validators than it allows",
}
"""Params fixed at genesis, with the reason: changing them would leave records computed under the old value
inconsistent with the new one until each is touched again."""


def parse_value(text: str) -> int:
    """The integer a change's JSON text holds; InvalidParamValue for anything else."""
    try:
        value = load_untrusted_json(text.encode())
    except (JsonRejected, UnicodeEncodeError) as error:
        raise InvalidParamValue(f"value {text[:40]!r} is not JSON: {error}") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidParamValue(f"value {text[:40]!r} is not an integer: every param is one")
    if not 0 <= value <= U64_MAX:
        raise InvalidParamValue(f"value {value} is outside 0..{U64_MAX}: every param is a non-negative 64-bit integer")
    return value


def _params_type(param_types: tuple[type, ...], section: str, key: str) -> type:
    by_section = {params_type.SECTION: params_type for params_type in param_types}
    params_type = by_section.get(section)
    if params_type is None:
        raise UnknownParam(f"unknown params section {section!r}; known: {', '.join(sorted(by_section))}")
    names = [field.name for field in dataclasses.fields(params_type)]
    if key not in names:
        raise UnknownParam(f"params section {section!r} has no param {key!r}; known: {', '.join(names)}")
    if (section, key) in NOT_GOVERNABLE:
        raise ParamNotGovernable(f"{section}.{key} is fixed at genesis: {NOT_GOVERNABLE[(section, key)]}")
    return params_type


def params_after(state: State, param_types: tuple[type, ...], changes: Sequence[Change]) -> dict[type, Any]:
    """Every section's params as they would be after all of `changes`; raises the gov error of the first
    change or rule that does not hold. Writes nothing."""
    current = current_params(state, param_types)
    pending: dict[type, dict] = {}
    for section, key, value in changes:
        params_type = _params_type(param_types, section, key)
        pending.setdefault(params_type, params_to_json(current[params_type]))[key] = value
    after = dict(current)
    for params_type, values in pending.items():
        try:
            after[params_type] = params_from_json(params_type, values)
        except InvalidRequest as error:
            raise InvalidParamValue(f"out of range: {error}") from None
    try:
        check_param_rules(after)
    except InvalidRequest as error:
        raise ParamRuleBroken(f"the params after this proposal's changes break a rule: {error}") from None
    return after


def apply_changes(state: State, param_types: tuple[type, ...], changes: Sequence[Change]) -> None:
    """Check `changes` against the params of now (`params_after`) and, only if all hold, write every changed
    section: all or nothing."""
    after = params_after(state, param_types, changes)
    changed = {_params_type(param_types, section, key) for section, key, _ in changes}
    for params_type in param_types:
        if params_type in changed:
            set_params(state, after[params_type])
