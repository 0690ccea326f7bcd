"""Downtime: the last commit's votes fill each validator's window; missing too many jails and slashes it once it
has been counted in a whole window; a halt and restart jails nobody who signs again."""

from __future__ import annotations

from chain_helpers import VALIDATOR_STAKE
from trolly.chain import keys
from trolly.chain.block import ValidatorUpdate
from trolly.chain.crypto import encode_address
from trolly.chain.delegations import get_delegation, tokens_of
from trolly.chain.params import set_params
from trolly.chain.proto.staking_pb2 import MsgDelegate, MsgUndelegate
from trolly.chain.signing_info import CHUNK_BITS, SlashingParams, get_signing_info
from trolly.chain.state import State
from trolly.chain.validators import get_validator, validator_self_bond

WINDOW = 10
LIVENESS = {"signed_blocks_window": WINDOW, "min_signed_per_window_bps": 5_000, "downtime_jail_blocks": 20,
            "slash_fraction_downtime_bps": 100, "halt_reset_seconds": 60}
"""A window of 10 commits of which at least 5 must be signed: the 6th miss of a window jails."""


def four_validators(make_chain, **slashing):
    return make_chain(validators=4, params={"slashing": {**LIVENESS, **slashing}})


def events(output, event_type: str) -> list[dict]:
    return [dict(e.attributes) for e in output.events if e.type == event_type]


def jailed(chain, index: int) -> bool:
    return get_validator(chain.state, chain.operators[index].address).jailed


def info(chain, index: int):
    return get_signing_info(chain.state, chain.consensus_keys[index].address)


def test_a_validator_that_stops_signing_is_jailed_and_slashed_once_counted_in_a_whole_window(make_chain):
    chain = four_validators(make_chain)
    supply = chain.query("/supply")["supply"]
    outputs = chain.advance(WINDOW - 1, last_commit=chain.commit_of([0, 1, 2]))
    assert not jailed(chain, 3), "judged before it was counted in a whole window"
    assert info(chain, 3).missed_blocks_counter == WINDOW - 1
    assert len(events(outputs[-1], "liveness")) == 1
    output = chain.block(last_commit=chain.commit_of([0, 1, 2]))
    burned = VALIDATOR_STAKE * 100 // 10_000
    validator = get_validator(chain.state, chain.operators[3].address)
    assert (validator.stake, validator.power, validator.jailed) == (VALIDATOR_STAKE - burned, 0, True)
    assert chain.query("/supply")["supply"] == supply - burned
    assert output.validator_updates == [ValidatorUpdate(chain.consensus_keys[3].pubkey, 0)]
    [slash] = events(output, "slash")
    assert (slash["reason"], slash["burned_stake"], slash["jailed_until"]) == ("downtime", str(burned),
                                                                              str(chain.height + 20))
    record = info(chain, 3)
    assert (record.start_height, record.index_offset, record.missed_blocks_counter, record.jailed_until) == (
        chain.height, 0, 0, chain.height + 20)
    assert not any(jailed(chain, i) for i in range(3))


def test_missing_no_more_than_the_window_allows_never_jails(make_chain):
    """Every other commit missed: 5 of each 10, the most allowed; old misses leave the ring as new ones come."""
    chain = four_validators(make_chain)
    for height in range(1, 6 * WINDOW + 1):
        chain.block(last_commit=chain.commit_of([0, 1, 2] + ([3] if height % 2 else [])))
    assert not jailed(chain, 3)
    assert (info(chain, 3).missed_blocks_counter, info(chain, 3).index_offset) == (WINDOW // 2, 6 * WINDOW)


def test_a_jailed_validator_is_not_counted_while_commits_still_list_it(make_chain):
    chain = four_validators(make_chain)
    chain.advance(WINDOW, last_commit=chain.commit_of([0, 1, 2]))
    assert jailed(chain, 3)
    chain.advance(3, last_commit=chain.commit_of([0, 1, 2]))  # CometBFT lists it for a block or two more
    assert (info(chain, 3).index_offset, info(chain, 3).missed_blocks_counter) == (0, 0)


def test_the_last_active_validator_is_never_jailed_for_downtime(make_chain):
    chain = make_chain(validators=1, params={"slashing": LIVENESS})
    outputs = chain.advance(WINDOW + 1, last_commit=chain.commit_of([]))
    assert not jailed(chain, 0)
    assert [e["reason"] for e in events(outputs[-1], "slash_skipped")] == ["last active validator"]


def test_a_validator_the_commit_does_not_list_is_not_counted(make_chain):
    """Validators outside CometBFT's set (not yet added, or removed) have no vote to miss."""
    chain = four_validators(make_chain)
    chain.advance(2 * WINDOW, last_commit=chain.commit_of([0, 1, 2], listed=[0, 1, 2]))
    assert info(chain, 3) is None and not jailed(chain, 3)


def test_the_missed_blocks_are_stored_in_chunks_and_none_for_a_validator_that_signs(make_chain):
    """A window longer than a chunk: misses spread over it take one key per 1024 commits, not one per commit."""
    chain = four_validators(make_chain, signed_blocks_window=3 * CHUNK_BITS, min_signed_per_window_bps=0)
    for height in range(1, 2 * CHUNK_BITS + 2):
        chain.block(last_commit=chain.commit_of([0, 1, 2] + ([3] if height % 3 else [])))
    stored = [key for key in chain.kv.items if key.startswith(keys.MISSED_BLOCKS)]
    prefix = keys.MISSED_BLOCKS + chain.consensus_keys[3].address
    assert len(stored) == 3 and all(key.startswith(prefix) for key in stored)
    assert info(chain, 3).missed_blocks_counter == (2 * CHUNK_BITS + 1) // 3


def test_a_halt_and_restart_jails_nobody_who_signs_again_within_the_window(make_chain):
    """The case Cosmos SDK chains' operators hit. Validators 2 and 3 were missing blocks before the chain halted
    (4 of their last 10, one short of the limit: their absence is what halted it). The chain stops for an
    hour: no blocks, so no misses. At the restart, the first commits carry only the signatures of the
    validators already back (0 and 1); 2 and 3 are still starting and catching up, and sign again from the
    third block on. Counted as ordinary misses, those two more would jail both at once, and with them half the
    power of a chain that has only just come back. A block more than `halt_reset_seconds` after the previous
    one starts every window again, so nobody is judged until a whole window after the restart."""
    chain = four_validators(make_chain)
    chain.advance(6, last_commit=chain.commit_of([0, 1, 2, 3]))
    chain.advance(4, last_commit=chain.commit_of([0, 1]))
    assert [info(chain, i).missed_blocks_counter for i in (2, 3)] == [4, 4]
    chain.halt(3600)
    restart = chain.advance(2, last_commit=chain.commit_of([0, 1]))
    [reset] = events(restart[0], "liveness_reset")
    assert (reset["reason"], reset["validators"]) == ("halt", "4")
    chain.advance(2 * WINDOW, last_commit=chain.commit_of([0, 1, 2, 3]))
    assert not any(jailed(chain, i) for i in range(4))
    assert [info(chain, i).missed_blocks_counter for i in range(4)] == [0, 0, 0, 0]


def test_without_a_halt_the_same_misses_jail(make_chain):
    """The control of the halt test: the same votes with no gap in time jail validators 2 and 3."""
    chain = four_validators(make_chain)
    chain.advance(6, last_commit=chain.commit_of([0, 1, 2, 3]))
    chain.advance(4, last_commit=chain.commit_of([0, 1]))
    chain.halt(59)  # a slow block, not a halt (halt_reset_seconds is 60)
    chain.advance(2, last_commit=chain.commit_of([0, 1]))
    assert jailed(chain, 2) and jailed(chain, 3)
    assert not jailed(chain, 0) and not jailed(chain, 1)


def test_a_change_of_window_starts_every_window_again(make_chain):
    """The ring's bits mean the last N commits only under the window they were counted with: a new window
    (a parameter change) starts afresh rather than reading old bits at new positions."""
    chain = four_validators(make_chain)
    chain.advance(4, last_commit=chain.commit_of([0, 1, 2]))
    state = State(chain.kv)
    set_params(state, SlashingParams(**{**LIVENESS, "signed_blocks_window": 2 * WINDOW}))
    chain.kv.apply(state.changes())
    output = chain.block(last_commit=chain.commit_of([0, 1, 2, 3]))
    assert [e["reason"] for e in events(output, "liveness_reset")] == ["signed_blocks_window changed"]
    record = info(chain, 3)
    assert (record.start_height, record.index_offset, record.missed_blocks_counter) == (chain.height, 1, 0)


def test_signing_info_query_reports_missed_blocks_jail_and_tombstone(make_chain):
    chain = four_validators(make_chain)
    chain.advance(3, last_commit=chain.commit_of([0, 1, 2]))
    operator = encode_address(chain.operators[3].address)
    answer = chain.query(f"/signing_info/{operator}")
    assert {k: answer[k] for k in ("missed_blocks_counter", "index_offset", "start_height", "jailed", "tombstoned",
                                   "max_missed_blocks", "signed_blocks_window")} == {
        "missed_blocks_counter": 3, "index_offset": 3, "start_height": 1, "jailed": False, "tombstoned": False,
        "max_missed_blocks": 5, "signed_blocks_window": WINDOW}
    assert len(chain.query("/signing_infos")) == 4


def test_a_downtime_slash_reaches_the_validators_delegators_exactly(make_chain):
    """The downtime slash goes through `slash_validator`: a delegation to the jailed validator loses exactly the
    fraction of the stake burned (its shares are untouched, their tokens fall), while stake that had already
    unbonded before the missed block the jailing names (the infraction height) is out of reach."""
    chain = four_validators(make_chain)
    operator, delegator, leaver = chain.operators[3], chain.accounts[0], chain.accounts[1]
    assert chain.deliver(delegator, MsgDelegate(validator=operator.address, amount=3_333_333)).ok
    assert chain.deliver(leaver, MsgDelegate(validator=operator.address, amount=2_000_000)).ok
    assert chain.deliver(leaver, MsgUndelegate(validator=operator.address, amount=2_000_000)).ok
    stake = VALIDATOR_STAKE + 3_333_333
    outputs = chain.advance(WINDOW, last_commit=chain.commit_of([0, 1, 2]))
    assert jailed(chain, 3)
    burned = stake * 100 // 10_000
    [reached] = events(outputs[-1], "validator_slash")
    assert (reached["reason"], reached["burned_bonded"], reached["burned_unbonding"],
            reached["infraction_height"]) == ("downtime", str(burned), "0", str(chain.height - 1))
    validator = get_validator(chain.state, operator.address)
    assert validator.stake == stake - burned
    delegation = get_delegation(chain.state, delegator.address, operator.address)
    assert tokens_of(delegation.shares, validator.stake, validator.delegator_shares) == (
        3_333_333 * (stake - burned) // stake)
    assert validator_self_bond(chain.state, validator) == VALIDATOR_STAKE * (stake - burned) // stake
    [entry] = chain.query(f"/unbonding/{encode_address(leaver.address)}")["entries"]
    assert entry["amount"] == 2_000_000
