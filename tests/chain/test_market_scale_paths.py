"""What a busy block of the market reads: a commitment and a verdict cost the same whatever else the block holds.

At scale (`benchmarks.market_scale`) a block carries thousands of commitments or verdicts, so what each one
reads must not grow with the task's other members or with the votes written before it in the block. These tests
count the committed store's reads while such blocks execute, and check that the cheaper paths answer what the
plain reading answers.
"""

from __future__ import annotations

from market_helpers import MARKET_PARAMS, Market, commit_message, event_actions, verdict_message
from trolly.chain import keys
from trolly.chain.market.params import MarketParams
from trolly.chain.market.records import VERDICT_PASS, Commitment, Task, decode_record, encode_record
from trolly.chain.market.store import find_commitment, get_task, iter_round_commitments, round_commitments
from trolly.chain.market.store import segment_votes, votes_of
from trolly.chain.market.tally import committee_of


def counting_reads(kv) -> dict[str, list[bytes]]:
    """Record every key `kv.get` is asked and every prefix `kv.iterate` scans, from now on."""
    seen: dict[str, list[bytes]] = {"get": [], "iterate": []}
    get, iterate = kv.get, kv.iterate

    def counted_get(key):
        seen["get"].append(key)
        return get(key)

    def counted_iterate(prefix):
        seen["iterate"].append(prefix)
        return iterate(prefix)

    kv.get, kv.iterate = counted_get, counted_iterate
    return seen


def running_task(make_chain, workers: int, validators: int = 3) -> tuple[Market, int]:
    """A running task; its chain checks invariants when the test ends, not after each block (their reads are not
    the block's)."""
    chain = make_chain(accounts=workers + 1, validators=validators, params={"market": MARKET_PARAMS},
                       check_each_block=False)
    market = Market(chain)
    return market, market.open_task(workers=workers)


def test_each_commitment_reads_at_most_one_other_members_record(make_chain):
    """Was: every commitment decoded every member of its task and each one's commitment, to see whether the round
    could close (the square of the members per task and round). Now a committed member costs a key lookup: only
    the first member still owing a commitment is read."""
    workers = 6
    market, task_id = running_task(make_chain, workers)
    chain = market.chain
    reads = counting_reads(chain.kv)
    txs = [chain.tx(w, commit_message(task_id, 0, w.address.hex())) for w in market.workers[:workers]]
    output = chain.block(*txs)
    assert all(r.ok for r in output.tx_results)
    member_reads = [key for key in reads["get"] if key.startswith(keys.MARKET_MEMBER)]
    # Each commitment: its own member record and at most the next one owing a commitment; the round's close at the
    # end of the block reads each member once more.
    assert len(member_reads) <= 2 * workers + workers
    assert get_task(chain.state, task_id).phase == "sampling"  # the last commitment closed the round


def test_a_block_of_verdicts_tallies_each_by_key_lookups_never_scanning_the_votes(make_chain):
    """Was: each verdict's tally scanned the votes under its segment's prefix, and a scan walks every key the block
    wrote under the same first byte: a block of n verdicts cost about n^2. Now the committee's votes are read by
    key, and the block scans no votes at all."""
    market, task_id = running_task(make_chain, workers=2)
    chain = market.chain
    market.commit(task_id, 0, market.workers[:2])
    chain.block()  # sampling
    reads = counting_reads(chain.kv)
    market.vote(chain.operators, task_id, VERDICT_PASS)
    assert not [prefix for prefix in reads["iterate"] if prefix.startswith(keys.MARKET_VERDICT)]
    assert get_task(chain.state, task_id).round == 1  # every segment decided, the round settled


def test_committee_votes_read_by_key_are_the_votes_a_scan_finds(make_chain):
    market, task_id = running_task(make_chain, workers=2, validators=4)
    chain = market.chain
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    operator = chain.operators[0]
    items = market.to_verify(operator)
    chain.block(*[chain.tx(operator, verdict_message(operator, task_id, item, VERDICT_PASS)) for item in items])
    state = chain.state
    for worker in market.workers[:2]:
        commitment = find_commitment(state, task_id, 0, worker.address)
        for segment in commitment.segments:
            scanned = segment_votes(state, task_id, 0, worker.address, segment)
            assert scanned and votes_of(state, task_id, 0, worker.address, segment,
                                        committee_of(commitment, segment)) == scanned


def test_round_commitments_read_lazily_are_those_read_at_once(make_chain):
    market, task_id = running_task(make_chain, workers=3)
    market.commit(task_id, 0, market.workers[:2])
    state = market.chain.state
    task = get_task(state, task_id)
    assert list(iter_round_commitments(state, task, 0)) == round_commitments(state, task, 0)
    assert len(round_commitments(state, task, 0)) == 2


def test_records_encode_to_the_bytes_they_were_decoded_from(make_chain):
    """The per-class field plan must give the same bytes as before: every record the chain holds round-trips."""
    market, task_id = running_task(make_chain, workers=2)
    market.commit(task_id, 0, market.workers[:2])
    items = market.chain.kv.items
    for prefix, record in ((keys.market_task_key(task_id), Task), (keys.MARKET_COMMIT, Commitment)):
        stored = [raw for key, raw in items.items() if key.startswith(prefix)]
        assert stored
        assert all(encode_record(decode_record(record, raw)) == raw for raw in stored)


def test_a_power_reader_answers_operator_power_reading_each_validator_once(make_chain):
    """Reveal settlement reckons a segment's committee and then its voters, the same validators: each validator
    record is now read once per reckoning, not once per mention."""
    from trolly.chain.market.power import operator_power, power_reader

    chain = make_chain(validators=3, check_each_block=False)
    reads = counting_reads(chain.kv)
    state = chain.state
    power = power_reader(state)
    operators = [key.address for key in chain.operators] + [b"\x01" * 20]  # three validators and a stranger
    answers = [power(operator) for operator in operators + operators]
    validator_reads = [key for key in reads["get"] if key.startswith(keys.validator_key(b"")[:1])]
    assert answers == [operator_power(state, operator) for operator in operators + operators]
    assert answers[:3] == [10, 10, 10] and answers[3] == 0
    assert len(validator_reads) == len(operators)


def test_shared_reads_of_a_tally_answer_as_the_plain_reads_even_after_a_power_change(make_chain):
    """The verdicts block reads validator records and votes shared (decoded once per block while their bytes stay
    the same), and skips the tally while a committee member with power has not voted (`awaiting_votes`): the
    tally must answer what the plain reads answer, and the shortcut only where the tally says undecided, also
    after a write in the same block changed a member's power (a stale power would count a validator that just
    lost it)."""
    from trolly.chain.block import BlockContext, BlockEnv
    from trolly.chain.market.power import operator_power, shared_power
    from trolly.chain.market.records import UNDECIDED
    from trolly.chain.market.tally import awaiting_votes, tally_segment
    from trolly.chain.state import State
    from trolly.chain.validators import jail_validator

    chain = make_chain(accounts=3, validators=5, params={"market": {**MARKET_PARAMS, "committee_size": 3}},
                       check_each_block=False)
    market = Market(chain)
    task_id = market.open_task(workers=2)
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    operator = chain.operators[0]
    items = market.to_verify(operator)
    chain.block(*[chain.tx(operator, verdict_message(operator, task_id, item, VERDICT_PASS)) for item in items])
    state, ctx = State(chain.kv), BlockContext(BlockEnv("trolly-test", 99, 99 * 10**9))

    waited: list[int] = []

    def answers() -> list:
        found = []
        for worker in market.workers[:2]:
            commitment = find_commitment(state, task_id, 0, worker.address)
            for segment in commitment.segments:
                committee = committee_of(commitment, segment)
                shared = votes_of(state, task_id, 0, worker.address, segment, committee, ctx)
                assert shared == votes_of(state, task_id, 0, worker.address, segment, committee)
                for closing in (False, True):
                    assert tally_segment(state, commitment, segment, closing, ctx) == \
                        tally_segment(state, commitment, segment, closing)
                    found.append(tally_segment(state, commitment, segment, closing, ctx))
                if awaiting_votes(state, ctx, commitment, segment):  # the shortcut answers what the tally does
                    assert tally_segment(state, commitment, segment) == UNDECIDED
                    waited.append(segment)
        assert [shared_power(state, ctx, op.address) for op in chain.operators] == \
            [operator_power(state, op.address) for op in chain.operators]
        return found

    before = answers()
    jail_validator(state, operator.address)
    assert shared_power(state, ctx, operator.address) == 0
    answers()
    assert before and waited  # the segments were tallied, and the shortcut met committees still voting


def test_the_reveal_window_close_reads_votes_by_key_and_deletes_only_them(make_chain):
    """The block that closes a reveal window deletes the round's votes after reading them; a scan under a vote
    prefix would then walk every deletion written before it (`State.iterate`), the square of the votes. It reads
    them by key, and deletes exactly the votes there were."""
    market, task_id = running_task(make_chain, workers=2)
    chain = market.chain
    market.commit(task_id, 0, market.workers[:2])
    chain.block()
    market.vote(chain.operators[:2], task_id, VERDICT_PASS)
    market.reveal(task_id)
    votes = {key for key in chain.kv.items if key.startswith(keys.MARKET_VERDICT)}
    assert votes
    reads = counting_reads(chain.kv)
    outputs = chain.advance(MarketParams().reveal_window)
    assert [a["round"] for o in outputs for a in event_actions(o, "reveals_closed")] == ["0"]
    assert not [prefix for prefix in reads["iterate"] if prefix.startswith(keys.MARKET_VERDICT)]
    assert not [key for key in chain.kv.items if key.startswith(keys.MARKET_VERDICT)]
