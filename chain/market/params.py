"""Market parameters, and the economics that choose their defaults.

Every amount is utrl and every rate is in basis points (1/10,000). A task copies the rates that concern it
(fees, penalties, delays) into its record when it is submitted, so its terms never change under it.

Why the collateral is what it is
--------------------------------
A worker who fakes part of its round (skips the compute for some segments and commits made-up checkpoints)
stays honest when the expected loss beats the gain:

    p * (R + S) >= f * C + V

- R: the worker's pay for the round (withheld when it is caught); we take R = reward_per_round / workers.
- S: the collateral slashed when it is caught.
- f * C: the compute it saves by faking a fraction f of its n segments (k = f * n of them); C <= R, or
  the honest worker would be working at a loss, so we take C = R (the cheater's best case).
- V: any gain from a wrong result (a poisoned model): `value_at_risk_bps` of R, default 100%.
- p: the chance that at least one of the s = samples_per_worker segments drawn (uniformly, without
  replacement, from a seed that did not exist when it committed) is one of the k faked ones:
  p(k) = 1 - C(n - k, s) / C(n, s).

The chain enforces it at `SubmitTask`: the collateral must be at least
`max(min_collateral, max over k = 1..n of ceil((k * C / n + V) / p(k)^m) - R)`, computed exactly with
integers (`minimum_collateral`).

m = `seed_choices` is the bias left in the sampling seed: the number of different seeds a party allied with
the cheater may pick between after the commitments are made. The cheater escapes when any one of them misses
all of its faked segments, so it is caught with p(k)^m, not p(k). m = 1 means nobody chooses the seed. The seed
comes from the validators' vote extensions (docs/protocol.md 4.3, `abci_app/seed.py`): the proposer of the
seed block chooses only which subset of the extension signatures it received to include, among those holding
more than two thirds of the power (5 subsets with the localnet's powers 40/30/20/10, for instance; up to
2^(number of validators whose power it may leave out) in general). Without `seed_from_extensions` a block
without extensions samples from its own hash, which its proposer can grind without bound. The chain param
records the m its operators accept for their validator set; sampling every segment (s = n, p = 1) makes the
collateral independent of m. Small cheats are the hard ones to catch (k = 1: p = s / n), big ones
save the most (k = n: p = 1, gain C + V). With n = 5 segments (50 inner steps, checkpoints every 10),
s = 2 and V = R, k = 1 asks for S >= (R/5 + R) * 5/2 - R = 2R, twice the worker's pay per round. Sampling
every segment (s = n) catches any cheat, and then S >= C + V - R = V: with V = R, one round's pay; with
V = 0 the floor `min_collateral` applies. More samples make honest work cheaper to secure; longer rounds
with more segments make it dearer, so requesters choose samples_per_worker against their segment count.

Missing a round is not cheating but it stalls everyone else: the worker loses `missed_round_penalty_bps` of
its collateral (burned, so nobody gains from provoking it) and is dropped, the rest of its collateral is
returned at once. A caught cheater loses all of it: `slash_verifier_bps` is shared by power among the
validators whose verdicts (FAIL or UNAVAILABLE) carried the decision, only FAIL voters are paid their share,
once their reveals show they replayed (an UNAVAILABLE voter's is burned, so nobody profits from calling a
worker unavailable, and so is a lazy FAIL voter's), and the rest is burned.
"""

from __future__ import annotations

import dataclasses

from ..errors import InvalidRequest


@dataclasses.dataclass(frozen=True)
class MarketParams:
    SECTION = "market"

    min_worker_stake: int = 10_000_000
    """Stake (utrl) a worker must lock to register: a sybil bond, returned after unbonding, never slashed."""

    worker_unbonding_blocks: int = 20_000
    """Blocks between UnregisterWorker and the stake's return (long enough to outlive the tasks it touched)."""

    max_tasks_per_worker: int = 8
    """Open or running tasks a worker may belong to at once (bounds the worker record)."""

    min_collateral: int = 1_000_000
    """Floor on the per-worker collateral of any task, whatever the formula above gives."""

    value_at_risk_bps: int = 10_000
    """V in the honesty condition, as a share of R: what a wrong result may be worth to a cheater."""

    max_spec_bytes: int = 16_384
    """Largest task spec accepted inline."""

    max_workers: int = 64
    """Most workers a task may ask for."""

    max_rounds: int = 1_000
    """Most rounds a task may ask for."""

    max_segments_per_round: int = 1_000
    """Most segments per worker-round (ceil(inner_steps / checkpoint_every)): bounds sampling work."""

    max_samples_per_worker: int = 64
    """Most segments a task may ask to replay per worker per round."""

    min_round_blocks: int = 2
    """Shortest commit phase of a round, in blocks."""

    max_round_blocks: int = 100_000
    """Longest commit phase of a round, in blocks."""

    max_join_blocks: int = 100_000
    """Longest time a task may wait for its workers before it expires."""

    sampling_delay: int = 1
    """Blocks between a round's close and the block whose hash seeds its sampling (>= 1, so the seed is a hash
    that did not exist when the last commitment was made)."""

    verification_window: int = 100
    """Blocks the validators have, after sampling, to vote on the sampled segments. When it closes, the
    undecided segments are tallied once more (with the powers of that block), and a worker whose segments
    are still not all decided is settled as `unverified`: it is neither slashed (nobody proved it
    cheated) nor paid (nobody proved it worked); its share of the round stays with the requester, it remains
    a member, and its update is left out of the next global weights, like a failed one."""

    validator_fee_bps: int = 200
    """Fee on every worker payout, paid into the fee collector (shared by all validators by power)."""

    verifier_fee_bps: int = 300
    """Fee on every worker payout, shared equally by the validators whose PASS verdicts verified it."""

    slash_verifier_bps: int = 5_000
    """Share of a slashed collateral paid to the validators who voted the failing verdict (FAIL voters, when
    their reveals check out); the rest is burned."""

    missed_round_penalty_bps: int = 1_000
    """Share of its collateral a worker loses (burned) when it misses a round's deadline or reports weights
    that lose the round's agreement."""

    key_delivery_blocks: int = 10
    """Blocks the requester of a private task has to deliver a member's data key from the start of the first
    round the member trains (and a drawn validator's from its draw): a member whose key came later, or never,
    and who did not commit that round is released without penalty and compensated by the requester; a validator
    whose key came later owes no vote (`market.key_faults`). A private task's `round_blocks` must exceed it, so
    a round leaves time to train once the key is there. The requester's clients look every 2 s and a delivery
    is included within a block or two; the localnet's 500 ms blocks get 20."""

    max_blob_url_bytes: int = 256
    """Longest blob URL a worker may register."""

    max_device_bytes: int = 128
    """Longest hardware device description."""

    max_profile_bytes: int = 128
    """Longest determinism profile string in a commitment."""

    seed_choices: int = 1
    """m in the honesty condition: how many sampling seeds a cheater's ally may choose between (see above)."""

    seed_from_extensions: int = 0
    """1: sample only in a block that carries a vote-extension seed (docs/protocol.md 4.3); a block without one
    defers sampling to the next block, so a proposer cannot fall back to a block hash it builds. 0: such a
    block samples from its own hash. 0 is the state machine's default, for tests that make blocks without an
    engine; every genesis Trolly writes sets 1 (docs/engines.md: both engines extend their votes)."""

    max_model_parameters: int = 100_000_000
    """Most parameters a spec's model may have (`market.footprint` counts them from its config)."""

    max_batch_size: int = 4_096
    """Largest `training.batch_size` a spec may ask for."""

    max_memory_mb: int = 16_384
    """Largest memory estimate (MiB, `market.footprint`) of a spec; a worker also checks the estimate against its
    own declared `hardware.memory_mb` before it joins."""

    max_dataset_shards: int = 8_192
    """Most shards a spec may declare for its dataset (`dataset.max_shards`): bounds the manifest every worker
    and verifier reads (one entry per shard)."""

    max_dataset_bytes: int = 1 << 35
    """Most shard bytes a spec may declare for its dataset (`dataset.max_bytes`); a worker also checks the
    manifest's bytes against its disk and memory before it joins."""

    committee_size: int = 7
    """k: validators drawn by stake, from the sampling seed, to verify each sampled segment (all of them when
    fewer are eligible; a GPU segment's committee grows past k until it holds more than a third of the power). A
    committee decides alone only when it is unanimous; any dissent sends the segment to the whole validator set
    (`market.tally`). A coalition holding a share a of the power fills every seat of a committee drawn by power,
    and so decides a segment alone, with probability at most a^k."""

    losing_verdict_penalty_bps: int = 500
    """Share of its stake a validator loses (burned, bonded then unbonding since its vote) for each segment on
    which the whole validator set decided against its PASS or FAIL vote, and at least `lazy_verifier_penalty` (a
    dispute makes every validator replay, whatever the disputer's stake): a false verdict, or a false GPU
    declaration that put it on the committee, costs its maker. 5 %, as a double-signing slash is in the
    Cosmos SDK: like a double signature, a vote that two thirds of the validators' power contradicted is a fault
    the chain proves by itself."""

    reveal_window: int = 10
    """Blocks after a round's verification in which each voter reveals the replay digest its vote committed to.
    The verifier fees of the round are held until then."""

    lazy_verifier_penalty: int = 1_000_000
    """utrl burned from the stake of a validator whose reveal is missing or disagrees with the segment's
    majority digest, bonded or unbonding since its vote (it also loses its share of the verifier fee)."""

    def __post_init__(self) -> None:
        if self.sampling_delay < 1:
            raise InvalidRequest("market.sampling_delay must be >= 1: the seed must come from a later block")
        if self.seed_from_extensions not in (0, 1):
            raise InvalidRequest("market.seed_from_extensions must be 0 or 1")
        if not 1 <= self.seed_choices <= 64:
            raise InvalidRequest("market.seed_choices must be within 1..64")
        if self.committee_size < 1:
            raise InvalidRequest("market.committee_size must be >= 1")
        if (self.verification_window < 1 or self.min_round_blocks < 1 or self.worker_unbonding_blocks < 1
                or self.reveal_window < 1 or self.key_delivery_blocks < 1):
            raise InvalidRequest("market windows and periods must be at least one block")
        for name in ("validator_fee_bps", "verifier_fee_bps", "slash_verifier_bps", "missed_round_penalty_bps",
                     "losing_verdict_penalty_bps"):
            if not 0 <= getattr(self, name) <= 10_000:
                raise InvalidRequest(f"market.{name} must be within 0..10000 basis points")

    @classmethod
    def localnet(cls) -> "MarketParams":
        """Short periods and small amounts, so a developer sees a whole task settle within a minute."""
        return cls(min_worker_stake=1_000_000, worker_unbonding_blocks=20, min_collateral=100_000,
                   verification_window=20, key_delivery_blocks=20)


def longest_reveal_wait(params: MarketParams) -> int:
    """The most blocks from a vote to its round's reveal deadline: the verification window, a second one when a
    segment escalates to the whole validator set (`round_lifecycle.escalate_to_whole_set`), then the reveal
    window."""
    return 2 * params.verification_window + params.reveal_window


def check_unbonding_outlasts_reveals(params: MarketParams, unbonding_blocks: int) -> None:
    """Refuse a staking `unbonding_blocks` that a reveal deadline can outlast: a lazy verifier's penalty is
    burned from what it unbonded since its vote (`reveals`), which only works while that is still unbonding."""
    longest = longest_reveal_wait(params)
    if unbonding_blocks <= longest:
        raise InvalidRequest(
            f"staking.unbonding_blocks ({unbonding_blocks}) must be more than 2 x market.verification_window "
            f"({params.verification_window}) + market.reveal_window ({params.reveal_window}) = {longest}: a lazy "
            "verifier's penalty is taken from the stake it unbonded since its vote, which must still be unbonding "
            "at its round's reveal deadline")
