"""Every storage key prefix of the state, in one place (like Cosmos `types/keys.go`).

A key is a one-byte prefix followed by the object's identifier. Modules build keys only through the
functions here, so two modules can never collide.
"""

ACCOUNT = b"\x01"  # + address(20) -> Account
PARAMS = b"\x02"  # -> canonical JSON of Params
SUPPLY = b"\x03"  # -> total supply (u64 big-endian)
CHAIN_META = b"\x04"  # + name -> chain metadata (chain id, ...)
LISTING_INDEX = b"\x05"  # + family prefix + group -> the group's entries, sorted and concatenated (listing_index.py)

# staking, distribution, slashing: 0x10..0x1f
VALIDATOR = b"\x10"  # + operator address(20) -> Validator (protobuf)
VALIDATOR_BY_CONS = b"\x11"  # + consensus address(20) -> operator address; kept forever, so a key is never reused
UNBONDING = b"\x12"  # + maturity height(8) + validator(20) + seq(8) -> UnbondingEntry (protobuf)
VALIDATOR_POWER_LAST = b"\x13"  # + operator address(20) -> last power sent to CometBFT (u64); absent = 0
VALIDATOR_POWER_CHANGED = b"\x14"  # + operator(20) -> b"\x01"; within a block only, cleared at end-block
UNBONDING_BY_OPERATOR = b"\x15"  # + validator(20) + maturity height(8) + seq(8) -> b"\x01" (index of UNBONDING)
ACTIVE_VALIDATOR = b"\x16"  # + operator(20) -> b"\x01" while the validator's power is > 0
SLASHED_EVIDENCE = b"\x17"  # + infraction height(8) + consensus address(20) -> b"\x01"; pruned past max age
UNBONDING_SEQUENCE = b"\x18"  # -> next unbonding entry sequence number (u64)
LIVENESS_CLOCK = b"\x1d"  # -> previous block's time (u64 ns) + signed_blocks_window it was counted under (u64)
MISSED_BLOCKS = b"\x1e"  # + consensus address(20) + chunk index(8) -> 128 bytes: 1024 bits, 1 = missed; no zero chunk
SIGNING_INFO = b"\x1f"  # + consensus address(20) -> ValidatorSigningInfo (protobuf)

# task market: 0x20..0x3f (reserved for the market module)
MARKET_WORKER = b"\x20"  # + worker address(20) -> Worker (canonical JSON)
MARKET_WORKER_UNBONDING = b"\x21"  # + maturity height(8) + worker address(20) -> stake (u64)
MARKET_NEXT_TASK_ID = b"\x22"  # -> next task id (u64)
MARKET_TASK = b"\x23"  # + task id(8) -> Task (canonical JSON)
MARKET_TASK_SPEC = b"\x24"  # + task id(8) -> the spec JSON bytes exactly as submitted
MARKET_OPEN_TASK = b"\x25"  # + task id(8) -> b"" while the task is open or running
MARKET_MEMBER = b"\x26"  # + task id(8) + worker address(20) -> Member (canonical JSON)
MARKET_COMMIT = b"\x27"  # + task id(8) + round(8) + worker address(20) -> Commitment (canonical JSON)
MARKET_VERDICT = b"\x28"  # + task id(8) + round(8) + worker(20) + segment(8) + validator(20) -> Vote
MARKET_PENDING_SEGMENT = b"\x29"  # + task id(8) + round(8) + worker(20) + segment(8) -> b"" awaiting verdicts
MARKET_SCHEDULE = b"\x2a"  # + height(8) + task id(8) + kind(1) -> b"": end-block work due at that height
MARKET_DATA_KEY = b"\x2b"  # + task id(8) + recipient address(20) -> a private task's KeyBox (canonical JSON)
MARKET_REPLAY_GPUS = b"\x2c"  # + operator address(20) -> the GPU profile parts its verifier replays (JSON list)
MARKET_DATA_KEY_HASH = b"\x30"  # + data key hash(32) -> the id (u64) of the private task that committed to it
MARKET_KEY_DRAWN = b"\x31"  # + task id(8) + operator address(20) -> height (u64) it was first drawn for the task
MARKET_WORKER_UNBONDING_BY_WORKER = b"\x32"  # + worker(20) + maturity height(8) -> b"\x01" (index of 0x21)

# governance: 0x40..0x4f
GOV_NEXT_PROPOSAL_ID = b"\x40"  # -> next proposal id (u64)
GOV_PROPOSAL = b"\x41"  # + proposal id(8) -> Proposal (canonical JSON)
GOV_DEPOSIT = b"\x42"  # + proposal id(8) + depositor(20) -> utrl deposited (u64), while the proposal is live
GOV_VOTE = b"\x43"  # + proposal id(8) + voter(20) -> the vote option (1 byte), until its voting period ends
GOV_QUEUE = b"\x44"  # + end height(8) + proposal id(8) -> b"": the end of a live proposal's current period

# delegation and its rewards: 0x50..0x5f
DELEGATION = b"\x50"  # + delegator(20) + validator(20) -> Delegation (protobuf)
DELEGATION_BY_VALIDATOR = b"\x51"  # + validator(20) + delegator(20) -> b"\x01" (index of DELEGATION)
UNBONDING_BY_DELEGATOR = b"\x52"  # + delegator(20) + validator(20) + maturity(8) + seq(8) -> b"\x01"
REDELEGATION = b"\x53"  # + maturity height(8) + seq(8) -> RedelegationEntry (protobuf)
REDELEGATION_BY_SOURCE = b"\x54"  # + src validator(20) + maturity(8) + seq(8) -> b"\x01"
REDELEGATION_BY_DELEGATOR = b"\x55"  # + delegator(20) + dst validator(20) + maturity(8) + seq(8) -> b"\x01"
REWARDS_CURRENT = b"\x56"  # + validator(20) -> CurrentRewards (protobuf)
REWARDS_HISTORICAL = b"\x57"  # + validator(20) + period(8) -> HistoricalRewards (protobuf)
REWARDS_OUTSTANDING = b"\x58"  # + validator(20) -> utrl credited to its delegators, not yet withdrawn (u64)
COMMUNITY_POOL = b"\x59"  # -> utrl of rewards no delegation can claim: rounding dust, rewards of no shares (u64)


def account_key(address: bytes) -> bytes:
    return ACCOUNT + address


def listing_index_key(prefix: bytes) -> bytes:
    """The listing index of the keys under `prefix` (a family's one-byte prefix and a group): `listing_index.py`."""
    return LISTING_INDEX + prefix


def u64(value: int) -> bytes:
    """Big-endian 8 bytes, so that keys sort numerically."""
    return value.to_bytes(8, "big")


# -- staking, distribution, slashing -------------------------------------------------------------------------
def validator_key(operator: bytes) -> bytes:
    return VALIDATOR + operator


def validator_by_cons_key(consensus_address: bytes) -> bytes:
    return VALIDATOR_BY_CONS + consensus_address


def unbonding_key(maturity_height: int, operator: bytes, sequence: int) -> bytes:
    """Ordered by maturity first, so end-block reads only the entries due at its height."""
    return UNBONDING + u64(maturity_height) + operator + u64(sequence)


def unbonding_by_operator_key(operator: bytes, maturity_height: int, sequence: int) -> bytes:
    return UNBONDING_BY_OPERATOR + operator + u64(maturity_height) + u64(sequence)


def last_power_key(operator: bytes) -> bytes:
    return VALIDATOR_POWER_LAST + operator


def power_changed_key(operator: bytes) -> bytes:
    return VALIDATOR_POWER_CHANGED + operator


def active_validator_key(operator: bytes) -> bytes:
    return ACTIVE_VALIDATOR + operator


def slashed_evidence_key(infraction_height: int, consensus_address: bytes) -> bytes:
    """Ordered by infraction height first, so records older than the evidence age are pruned cheaply."""
    return SLASHED_EVIDENCE + u64(infraction_height) + consensus_address


def signing_info_key(consensus_address: bytes) -> bytes:
    return SIGNING_INFO + consensus_address


def missed_blocks_key(consensus_address: bytes, chunk: int) -> bytes:
    """One validator's missed-blocks bit array, 1024 bits to a key: a block costs at most one chunk's write,
    and a validator that signs keeps no chunk at all (all-zero chunks are deleted)."""
    return MISSED_BLOCKS + consensus_address + u64(chunk)


# -- delegation and its rewards ---------------------------------------------------------------------------
def delegation_key(delegator: bytes, validator: bytes) -> bytes:
    return DELEGATION + delegator + validator


def delegation_by_validator_key(validator: bytes, delegator: bytes) -> bytes:
    return DELEGATION_BY_VALIDATOR + validator + delegator


def unbonding_by_delegator_key(delegator: bytes, validator: bytes, maturity_height: int, sequence: int) -> bytes:
    return UNBONDING_BY_DELEGATOR + delegator + validator + u64(maturity_height) + u64(sequence)


def redelegation_key(maturity_height: int, sequence: int) -> bytes:
    """Ordered by maturity first, so end-block reads only the redelegations due at its height."""
    return REDELEGATION + u64(maturity_height) + u64(sequence)


def redelegation_by_source_key(src: bytes, maturity_height: int, sequence: int) -> bytes:
    return REDELEGATION_BY_SOURCE + src + u64(maturity_height) + u64(sequence)


def redelegation_by_delegator_key(delegator: bytes, dst: bytes, maturity_height: int, sequence: int) -> bytes:
    return REDELEGATION_BY_DELEGATOR + delegator + dst + u64(maturity_height) + u64(sequence)


def rewards_current_key(validator: bytes) -> bytes:
    return REWARDS_CURRENT + validator


def rewards_historical_key(validator: bytes, period: int) -> bytes:
    return REWARDS_HISTORICAL + validator + u64(period)


def rewards_outstanding_key(validator: bytes) -> bytes:
    return REWARDS_OUTSTANDING + validator


# -- task market ---------------------------------------------------------------------------------------------
def market_worker_key(worker: bytes) -> bytes:
    return MARKET_WORKER + worker


def market_worker_unbonding_key(maturity_height: int, worker: bytes) -> bytes:
    """Ordered by maturity, so end-block reads only the stakes due at its height."""
    return MARKET_WORKER_UNBONDING + u64(maturity_height) + worker


def market_worker_unbonding_by_worker_key(worker: bytes, maturity_height: int) -> bytes:
    """A worker's own unbonding stakes, so that `/market/worker/<address>` reads its own, not every worker's."""
    return MARKET_WORKER_UNBONDING_BY_WORKER + worker + u64(maturity_height)


def market_task_key(task_id: int) -> bytes:
    return MARKET_TASK + u64(task_id)


def market_task_spec_key(task_id: int) -> bytes:
    return MARKET_TASK_SPEC + u64(task_id)


def market_open_task_key(task_id: int) -> bytes:
    return MARKET_OPEN_TASK + u64(task_id)


def market_member_key(task_id: int, worker: bytes) -> bytes:
    return MARKET_MEMBER + u64(task_id) + worker


def market_commit_key(task_id: int, round_: int, worker: bytes) -> bytes:
    return market_round_commit_prefix(task_id, round_) + worker


def market_round_commit_prefix(task_id: int, round_: int) -> bytes:
    """The commitments of one round of a task: their keys are this followed by the worker's address."""
    return MARKET_COMMIT + u64(task_id) + u64(round_)


def market_vote_key(task_id: int, round_: int, worker: bytes, segment: int, validator: bytes) -> bytes:
    return market_segment_votes_prefix(task_id, round_, worker, segment) + validator


def market_segment_votes_prefix(task_id: int, round_: int, worker: bytes, segment: int) -> bytes:
    """The prefix of every vote on one sampled segment (its keys end with the voter's operator address)."""
    return MARKET_VERDICT + u64(task_id) + u64(round_) + worker + u64(segment)


def market_pending_segment_key(task_id: int, round_: int, worker: bytes, segment: int) -> bytes:
    return MARKET_PENDING_SEGMENT + u64(task_id) + u64(round_) + worker + u64(segment)


def market_schedule_key(height: int, task_id: int, kind: int) -> bytes:
    """Ordered by height first, so end-block reads only the task work due at its height."""
    return MARKET_SCHEDULE + u64(height) + u64(task_id) + bytes([kind])


def market_data_key_key(task_id: int, recipient: bytes) -> bytes:
    return MARKET_DATA_KEY + u64(task_id) + recipient


def market_replay_gpus_key(operator: bytes) -> bytes:
    return MARKET_REPLAY_GPUS + operator


def market_data_key_hash_key(data_key_hash: bytes) -> bytes:
    return MARKET_DATA_KEY_HASH + data_key_hash


def market_key_drawn_key(task_id: int, operator: bytes) -> bytes:
    return MARKET_KEY_DRAWN + u64(task_id) + operator


# -- governance ----------------------------------------------------------------------------------------------
def gov_proposal_key(proposal_id: int) -> bytes:
    return GOV_PROPOSAL + u64(proposal_id)


def gov_deposit_key(proposal_id: int, depositor: bytes) -> bytes:
    return GOV_DEPOSIT + u64(proposal_id) + depositor


def gov_vote_key(proposal_id: int, voter: bytes) -> bytes:
    return GOV_VOTE + u64(proposal_id) + voter


def gov_queue_key(end_height: int, proposal_id: int) -> bytes:
    """Ordered by height first, so end-block reads only the periods ending at its height."""
    return GOV_QUEUE + u64(end_height) + u64(proposal_id)
