"""Shared fixtures. Every State a state-machine test registers has all module invariants checked when the
test ends (like Cosmos `keeper/invariants.go`), so no test can leave the chain inconsistent
unnoticed. `chain` / `make_chain` give the harness of `chain_helpers.py`, registered automatically.
The session pins a replayable instruction set first, and no test may replace its process (`process_guard`)."""

from __future__ import annotations

import pytest

from trolly.compute.instruction_sets import pin_replayable_instruction_set

# Before any test imports torch: the session trains and commits under a replayable instruction set, as the
# console scripts do, whatever this machine's CPU (its children inherit the pin).
pin_replayable_instruction_set()

pytest_plugins = ["process_guard"]


@pytest.fixture(autouse=True)
def _registered_states():
    """Collects the States registered by the test; checks their invariants after it."""
    states: list = []
    yield states
    if states:
        from trolly.chain.app import check_invariants  # imported lazily: tests that register nothing skip it

        for state in states:
            check_invariants(state)


@pytest.fixture
def register_state(_registered_states):
    """`register_state(state)`: have the invariants of `state` checked when the test ends."""
    return _registered_states.append


@pytest.fixture
def make_chain(register_state):
    """`make_chain(**options)` builds a `chain_helpers.Chain` and registers its committed state."""
    from chain_helpers import Chain

    def make(**options):
        chain = Chain(**options)
        register_state(chain.state)  # a live view: reads the store as it is at the end
        return chain

    return make


@pytest.fixture
def chain(make_chain):
    """Four funded accounts and one genesis validator (power 10), default params."""
    return make_chain()


@pytest.fixture
def taken_address():
    """An address another socket listens on throughout the test (`net_helpers.held_address`)."""
    from net_helpers import held_address

    with held_address() as address:
        yield address
