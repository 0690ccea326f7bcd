"""The `wasm32` determinism profile on chain (issue 37 item 1): a spec allows it in `determinism.kernels`, only for
an MLP on classification features (the kernel trains nothing else); a commitment under it is accepted in a task
that allows it and refused in one that does not, as a torch profile is refused in a task allowing only wasm32;
its committees are drawn from every validator, as a CPU profile's, since every verifier replays the kernel."""

from __future__ import annotations

import json

import pytest

from market_helpers import CPU_PROFILE, MARKET_PARAMS, SPEC, Market, assert_fails, commit_message, edited
from trolly.chain.crypto import encode_address
from trolly.chain.market.errors import InvalidSpec, ProfileNotAllowed, UnknownProfile
from trolly.chain.market.profiles import WASM32_PROFILE, check_profile_form, profile_kernel
from trolly.chain.market.spec import DEFAULT_KERNELS, validate_spec
from trolly.compute.errors import SpecError
from trolly.compute.spec import parse_spec

BOTH = ["torch", "wasm32"]


def with_kernels(kernels, document=SPEC) -> bytes:
    return json.dumps(edited(document, ["determinism", "kernels"], kernels)).encode()


def test_a_spec_names_no_kernel_and_allows_torch_alone_or_allows_wasm32_for_a_digits_mlp():
    plain = json.dumps(SPEC).encode()
    assert validate_spec(plain, 2).kernels == DEFAULT_KERNELS == ("torch",) == parse_spec(plain).kernels
    for kernels in (BOTH, ["wasm32"], ["wasm32", "torch"]):
        assert validate_spec(with_kernels(kernels), 2).kernels == tuple(kernels) == parse_spec(
            with_kernels(kernels)).kernels


REGRESSION = {"name": "packed", "manifest_hash": "ab" * 32, "input_size": 5, "num_classes": 1, "task": "regression"}


@pytest.mark.parametrize("model, dataset, words", [
    ({"arch": "cnn", "config": {}}, None, "not for a cnn"),
    ({"arch": "mlp", "config": {"hidden": [8]}}, REGRESSION, "regression data"),
    ({"arch": "transformer", "config": {}}, {"name": "pycorpus", "manifest_hash": "ab" * 32}, "transformer on token"),
])
def test_a_spec_allowing_wasm32_for_anything_but_an_mlp_on_classification_features_is_refused(model, dataset, words):
    """Attack: a requester allowing wasm32 for a model the kernel cannot train: browser workers would join, lock
    collateral and miss every round. The chain and compute refuse the spec with the same words."""
    document = edited(SPEC, ["model"], model)
    if dataset is not None:
        document = edited(document, ["dataset"], dataset)
    raw = with_kernels(BOTH, document)
    with pytest.raises(InvalidSpec, match=words):
        validate_spec(raw, 2)
    with pytest.raises(SpecError, match=words):
        parse_spec(raw)
    assert validate_spec(with_kernels(["torch"], document), 2).kernels == ("torch",)


@pytest.mark.parametrize("kernels", [[], ["gpu"], ["wasm32", "wasm32"], "wasm32", [1], [["torch"]], None])
def test_a_malformed_kernel_list_is_refused_by_the_chain_and_by_compute(kernels):
    raw = with_kernels(kernels)
    with pytest.raises(InvalidSpec, match="determinism.kernels must be a list of distinct kernels"):
        validate_spec(raw, 2)
    with pytest.raises(SpecError, match="determinism.kernels must be a list of distinct kernels"):
        parse_spec(raw)


def test_the_wasm32_profile_is_a_form_the_chain_knows_and_its_near_misses_are_not():
    check_profile_form(WASM32_PROFILE)
    assert profile_kernel(WASM32_PROFILE) == "wasm32" and profile_kernel(CPU_PROFILE) == "torch"
    for near in ("wasm32/kernel-2", "wasm32", "wasm32/kernel-1/", "WASM32/kernel-1", "wasm64/kernel-1"):
        with pytest.raises(UnknownProfile):
            check_profile_form(near)


def kernel_market(make_chain, kernels):
    chain = make_chain(accounts=3, validators=3, params={"market": {**MARKET_PARAMS, "committee_size": 2}})
    market = Market(chain)
    task_id = market.open_task(workers=2, spec=with_kernels(kernels), collateral=4 * 10**6, samples_per_worker=1,
                               round_blocks=50)
    return chain, market, task_id


def test_a_wasm32_commitment_is_refused_in_a_task_that_does_not_allow_it(make_chain):
    """Attack: a worker trains with the browser kernel in a task whose requester asked for torch's profiles only
    (its batches and arithmetic are not torch's): the commitment is refused, nothing recorded."""
    chain, market, task_id = kernel_market(make_chain, ["torch"])
    result = chain.deliver(market.workers[0], commit_message(task_id, 0, "w", determinism_profile=WASM32_PROFILE))
    assert_fails(result, ProfileNotAllowed)
    assert "allows torch" in result.log
    assert market.task(task_id)["round_details"][0]["commitments"] == []


def test_a_torch_commitment_is_refused_in_a_task_that_allows_only_wasm32(make_chain):
    chain, market, task_id = kernel_market(make_chain, ["wasm32"])
    result = chain.deliver(market.workers[0], commit_message(task_id, 0, "w"))
    assert_fails(result, ProfileNotAllowed)
    assert chain.deliver(market.workers[1], commit_message(task_id, 0, "w1", determinism_profile=WASM32_PROFILE)).ok


def test_in_a_task_allowing_both_a_wasm32_and_a_cpu_commitment_are_drawn_committees_from_every_validator(make_chain):
    chain, market, task_id = kernel_market(make_chain, BOTH)
    profiles = [WASM32_PROFILE, CPU_PROFILE]
    results = chain.block(*[chain.tx(worker, commit_message(task_id, 0, worker.address.hex(),
                                                            determinism_profile=profile))
                            for worker, profile in zip(market.workers, profiles)]).tx_results
    assert all(result.ok for result in results), [result.log for result in results]
    chain.block()  # the sampling block
    commitments = market.task(task_id)["round_details"][0]["commitments"]
    assert {c["worker"]: c["determinism_profile"] for c in commitments} == {
        encode_address(worker.address): profile for worker, profile in zip(market.workers, profiles)}
    operators = {encode_address(operator.address) for operator in chain.operators}
    for commitment in commitments:
        drawn = {member for committee in commitment["committees"] for member in committee}
        assert drawn and drawn <= operators
        assert commitment["drawn"] == [2] * len(commitment["committees"])  # a committee of 2, as for a CPU profile
