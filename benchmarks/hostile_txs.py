"""Hostile transactions: hypothesis strategies for every message type, correctly signed, and a genesis for them.

What a stranger can send costs nothing to try, so every field is drawn from what breaks parsers and state
machines: empty and oversized bytes, zero, one, 2^63 and 2^64 - 1, odd unicode (controls, bidi overrides,
combining marks, astral characters), and task specs that are valid JSON templates mutated into huge numbers,
negative numbers, floats, deep nesting, duplicate keys, NaN, truncation or plain garbage. Some draws stay
plausible (a valid spec, a task id that exists), so that transactions also reach the deep paths (escrow,
joining, commitments, verdicts) instead of failing at the first check.

Every transaction is signed by a funded genesis account with its next nonce (`Signers` tracks nonces from the
results' `tx` events), so it passes the ante handler and exercises the messages themselves. Used by
tests/chain/test_chain_fuzz.py and by `python -m benchmarks.fuzz_chain`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field

from hypothesis import strategies as st

from trolly.chain.crypto import PrivateKey, encode_address
from trolly.chain.gov.params import GovParams
from trolly.chain.market.params import MarketParams
from trolly.chain.params import params_to_json
from trolly.chain.proto import bank_pb2, distribution_pb2, gov_pb2, market_pb2, slashing_pb2, staking_pb2, tx_pb2
from trolly.chain.tx import sign_bytes, type_url_of
from trolly.chain.validators import StakingParams

CHAIN_ID = "trolly-fuzz"
ACCOUNTS = 256
VALIDATORS = 4
BALANCE = 10**15
VALIDATOR_STAKE = 10_000_000
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1


def fuzz_key(index: int) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"trolly/fuzz-key/%d" % index).digest())


KEYS = [fuzz_key(i) for i in range(ACCOUNTS)]
CONSENSUS_KEYS = [fuzz_key(10_000 + i) for i in range(ACCOUNTS)]


def genesis_app_state(fee_per_byte: int = 1) -> dict:
    """Funded accounts; the first VALIDATORS operate validators; localnet market and staking periods, so that
    deadlines, unbonding and settlement happen within a fuzz run, and gov periods of two blocks, so that
    proposals are tallied and applied within one; small real fees, so the ante charges."""
    return {
        "params": {
            "auth": {"min_fee": 1, "fee_per_byte": fee_per_byte},
            "staking": params_to_json(StakingParams.localnet()),
            "market": params_to_json(MarketParams.localnet()),
            "gov": params_to_json(GOV_PARAMS),
        },
        "accounts": [{"address": encode_address(k.address), "balance": str(BALANCE)} for k in KEYS],
        "validators": [{"operator": encode_address(KEYS[i].address),
                        "pub_key": base64.b64encode(CONSENSUS_KEYS[i].pubkey).decode(),
                        "stake": str(VALIDATOR_STAKE), "moniker": f"fuzz-{i}"} for i in range(VALIDATORS)],
    }


GOV_PARAMS = GovParams(min_deposit=1_000_000, max_deposit_blocks=2, voting_period_blocks=2)

PLAUSIBLE_GPUS = ["gpu-NVIDIA-H100-80GB-HBM3+driver-550.54.15+cuda-12.4",
                  "gpu-NVIDIA-A100-SXM4-40GB+driver-535.104.05+cuda-12.2"]
plausible_profile = st.sampled_from(
    ["torch-2.13.0+cpu/threads-1/isa-avx2/deterministic-ftz", "torch-2.13.0+cpu/threads-4/isa-default/deterministic-ftz",
     "cpu-t1", "torch-2.13.0+cpu/threads-1/isa-avx512/deterministic-ftz"]
    + [f"torch-2.13.0+cu130/threads-1/isa-avx2/{gpu}/deterministic-ftz" for gpu in PLAUSIBLE_GPUS])
"""Profiles the chain knows (CPU, and GPU ones the fuzz's validators may declare) and a few it refuses."""


# -- hostile field values --------------------------------------------------------------------------------------
EDGE_U64 = [0, 1, 2, 999_999, 1_000_000, 10**9, (1 << 31), (1 << 32), (1 << 63) - 1, 1 << 63, U64_MAX - 1, U64_MAX]
u64 = st.sampled_from(EDGE_U64) | st.integers(0, U64_MAX) | st.integers(0, 10_000_000)
u32 = st.sampled_from([0, 1, 2, 3, 5, 64, 65, 1000, (1 << 31), U32_MAX]) | st.integers(0, U32_MAX)
small_id = st.integers(0, 12)
ODD_TEXT = ["", " ", "\x00", "\t\n", "\u202e", "e\u0301" * 40, "\U0001f600" * 30, "a" * 5000, "\ufeff",
            "http://169.254.169.254/latest/meta-data", "http://[::1]:0", "http://127.0.0.1:99999",
            "https://user:pass@example.com", "http://example.com/\r\nX: y", "javascript:alert(1)",
            "http://" + "a" * 300 + ".com", "http://10.0.0.1:8080/", "HTTP://EXAMPLE.COM"]
text = st.sampled_from(ODD_TEXT) | st.text(max_size=80) | st.text(alphabet=st.characters(codec="utf-8"), max_size=300)
raw_bytes = st.binary(max_size=72) | st.sampled_from([b"", b"\x00" * 20, b"\xff" * 32, b"\x00" * 33])
address = st.sampled_from([k.address for k in KEYS[:8]]) | st.binary(min_size=20, max_size=20) | raw_bytes
pubkey = st.sampled_from([k.pubkey for k in CONSENSUS_KEYS[:12]]) | raw_bytes
digest32 = st.binary(min_size=32, max_size=32) | raw_bytes


# -- task specs: a valid template, mutated ------------------------------------------------------------------------
SPEC = {
    "version": 1,
    "model": {"arch": "mlp", "config": {"hidden": [16]}},
    "dataset": {"name": "digits", "manifest_hash": "ab" * 32},
    "training": {"rounds": 2, "inner_steps": 10, "batch_size": 8, "checkpoint_every": 5, "seed": 7,
                 "inner_optimizer": {"name": "adamw", "lr": 0.001}},
    "codec": "topk-int8",
}
HOSTILE_VALUES = [
    None, True, -1, 0, 10**30, -(10**30), 2**63, 2**64, 1.5, 1e308, -0.0, "", "x" * 500, [], {}, [[[[]]]],
    {"name": "adamw", "lr": "1e-99999"}, "\u0000", ["\ud7ff"],
]


@st.composite
def hostile_spec(draw) -> bytes:
    kind = draw(st.sampled_from(["valid", "private", "leaf", "leaf", "drop", "extra", "raw", "deep", "huge-int",
                                 "duplicate", "nan", "truncate", "garbage", "float-exponent"]))
    spec = json.loads(json.dumps(SPEC))
    if kind in ("valid", "private"):
        spec["training"]["seed"] = draw(st.integers(0, 10**6))
        if kind == "private":
            spec["dataset"]["cipher"] = "xsalsa20poly1305"
        return json.dumps(spec).encode()
    if kind in ("leaf", "drop", "extra"):
        section = draw(st.sampled_from(["model", "dataset", "training", "root"]))
        target = spec if section == "root" else spec[section]
        name = draw(st.sampled_from(sorted(target)))
        if kind == "leaf":
            target[name] = draw(st.sampled_from(HOSTILE_VALUES) | st.integers() | st.text(max_size=20))
        elif kind == "drop":
            del target[name]
        else:
            target[draw(text)] = draw(st.sampled_from(HOSTILE_VALUES))
        return json.dumps(spec, ensure_ascii=draw(st.booleans())).encode()
    body = json.dumps(spec)
    if kind == "raw":
        return draw(st.binary(max_size=200))
    if kind == "deep":
        depth = draw(st.sampled_from([15, 16, 17, 100, 3000]))
        return body.replace('"hidden": [16]', '"hidden": ' + "[" * depth + "16" + "]" * depth).encode()
    if kind == "huge-int":
        digits = draw(st.sampled_from([19, 20, 39, 40, 41, 640, 4301, 5000]))
        return body.replace('"seed": 7', '"seed": ' + "9" * digits).encode()
    if kind == "duplicate":
        return body.replace('"codec": "topk-int8"', '"codec": "topk-int8", "codec": "fp16"').encode()
    if kind == "nan":
        return body.replace('"lr": 0.001', '"lr": ' + draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))).encode()
    if kind == "float-exponent":
        exponent = draw(st.sampled_from(["1e-38", "1e-39", "1e38", "1e39", "1e-400", "5E+2", "0.1e-99999999"]))
        return body.replace('"lr": 0.001', '"lr": ' + exponent).encode()
    if kind == "truncate":
        return body.encode()[:draw(st.integers(0, len(body) - 1))]
    return draw(st.binary(min_size=1, max_size=400))


# -- one strategy per message type ----------------------------------------------------------------------------------
hardware = st.builds(market_pb2.HardwareProfile, device=text, samples_per_second=u64, memory_mb=u64, threads=u32)
plausible_url = st.sampled_from(["http://127.0.0.1:9000", "https://worker.example.org:8443/blobs"])


@st.composite
def submit_task(draw) -> market_pb2.MsgSubmitTask:
    spec = draw(hostile_spec())
    right_hash = draw(st.integers(0, 9)) > 0
    plausible = draw(st.booleans())
    if plausible:
        terms = dict(budget=10**12, workers=draw(st.sampled_from([1, 2])), rounds=2, reward_per_round=1_000_000,
                     collateral=10**9, join_blocks=draw(st.sampled_from([3, 10])),
                     round_blocks=draw(st.sampled_from([5, 30])), samples_per_worker=draw(st.sampled_from([1, 2])))
    else:
        terms = dict(budget=draw(u64), workers=draw(u32), rounds=draw(u32), reward_per_round=draw(u64),
                     collateral=draw(u64), join_blocks=draw(u64), round_blocks=draw(u64),
                     samples_per_worker=draw(u32))
    key_hash = draw(st.one_of(st.just(b""), digest32, st.binary(max_size=40)))  # private specs need 32 bytes, once
    return market_pb2.MsgSubmitTask(spec=spec, spec_hash=hashlib.sha256(spec).digest() if right_hash
                                    else draw(digest32), data_key_hash=key_hash, **terms)


PLAUSIBLE_CHANGES = [("market", "reveal_window", "12"), ("market", "validator_fee_bps", "300"),
                     ("market", "verification_window", "1000"), ("staking", "unbonding_blocks", "61"),
                     ("gov", "voting_period_blocks", "1"), ("gov", "quorum_bps", "10000"), ("auth", "min_fee", "2"),
                     ("staking", "power_reduction", "1000"), ("market", "committee_size", "0")]
"""Changes the chain knows, some that pass every check and some that break a range, a rule or a fixed param."""
plausible_change = st.sampled_from(PLAUSIBLE_CHANGES).map(lambda c: gov_pb2.ParamChange(section=c[0], key=c[1],
                                                                                        value=c[2]))
hostile_change = st.builds(gov_pb2.ParamChange, section=text, key=text, value=text | u64.map(str))


def either(plausible, hostile):
    """Mostly plausible values (which reach deep paths: escrow, joins, commitments, votes), else hostile ones."""
    return st.one_of(plausible, plausible, hostile)


known_address = st.sampled_from([k.address for k in KEYS])
validator_address = st.sampled_from([k.address for k in KEYS[:VALIDATORS + 1]])
"""The genesis validators' operators, and one account that is not one."""
bps = st.sampled_from([0, 1, 100, 999, 1000, 2000, 10_000, 10_001]) | u32
sane_hardware = st.builds(market_pb2.HardwareProfile, device=st.just("cpu"), samples_per_second=st.just(100),
                          memory_mb=st.just(1024), threads=st.just(1))

MESSAGES = {
    "send": either(st.builds(bank_pb2.MsgSend, to=known_address, amount=st.integers(1, 10**6)),
                   st.builds(bank_pb2.MsgSend, to=address, amount=u64)),
    "create_validator": either(
        st.builds(staking_pb2.MsgCreateValidator, consensus_pubkey=st.sampled_from([k.pubkey for k in CONSENSUS_KEYS]),
                  stake=st.just(VALIDATOR_STAKE), moniker=st.just("joiner")),
        st.builds(staking_pb2.MsgCreateValidator, consensus_pubkey=pubkey, stake=u64, moniker=text,
                  commission_rate=bps | st.none(), max_rate=bps | st.none(), max_change_rate=bps | st.none(),
                  details=text)),
    "bond": either(st.builds(staking_pb2.MsgBond, amount=st.integers(1, 10**7)), st.builds(staking_pb2.MsgBond, amount=u64)),
    "unbond": either(st.builds(staking_pb2.MsgUnbond, amount=st.integers(1, 10**7)),
                     st.builds(staking_pb2.MsgUnbond, amount=u64)),
    "unjail": st.builds(slashing_pb2.MsgUnjail),
    "delegate": either(st.builds(staking_pb2.MsgDelegate, validator=validator_address, amount=st.integers(1, 10**7)),
                       st.builds(staking_pb2.MsgDelegate, validator=address, amount=u64)),
    "undelegate": either(
        st.builds(staking_pb2.MsgUndelegate, validator=validator_address, amount=st.integers(1, 10**7)),
        st.builds(staking_pb2.MsgUndelegate, validator=address, amount=u64)),
    "redelegate": either(
        st.builds(staking_pb2.MsgRedelegate, src_validator=validator_address, dst_validator=validator_address,
                  amount=st.integers(1, 10**7)),
        st.builds(staking_pb2.MsgRedelegate, src_validator=address, dst_validator=address, amount=u64)),
    "edit_validator": either(
        st.builds(staking_pb2.MsgEditValidator, commission_rate=st.integers(900, 1100) | st.none(),
                  moniker=st.just("renamed") | st.just(""), details=st.just("about") | st.none()),
        st.builds(staking_pb2.MsgEditValidator, commission_rate=bps | st.none(), moniker=text,
                  details=text | st.none())),
    "withdraw_rewards": either(st.builds(distribution_pb2.MsgWithdrawRewards, validator=validator_address),
                               st.builds(distribution_pb2.MsgWithdrawRewards, validator=address)),
    "register_worker": either(
        st.builds(market_pb2.MsgRegisterWorker, stake=st.just(10**8), hardware=sane_hardware, blob_url=plausible_url),
        st.builds(market_pb2.MsgRegisterWorker, stake=u64, hardware=hardware | st.none(), blob_url=text)),
    "update_worker": either(
        st.builds(market_pb2.MsgUpdateWorker, add_stake=st.integers(1, 10**6), blob_url=plausible_url),
        st.builds(market_pb2.MsgUpdateWorker, add_stake=u64, hardware=hardware | st.none(), blob_url=text)),
    "unregister_worker": st.builds(market_pb2.MsgUnregisterWorker),
    "submit_task": submit_task(),
    "cancel_task": st.builds(market_pb2.MsgCancelTask, task_id=small_id | u64),
    "join_task": st.builds(market_pb2.MsgJoinTask, task_id=small_id | u64),
    "leave_task": st.builds(market_pb2.MsgLeaveTask, task_id=small_id | u64),
    "deliver_key": either(
        st.builds(market_pb2.MsgDeliverKey, task_id=st.integers(1, 12), recipient=known_address,
                  sealed_key=st.binary(min_size=80, max_size=80), sender_proof=st.binary(min_size=64, max_size=64)),
        st.builds(market_pb2.MsgDeliverKey, task_id=small_id | u64, recipient=address, sealed_key=st.binary(max_size=200),
                  sender_proof=st.binary(max_size=100))),
    "report_bad_key": either(
        st.builds(market_pb2.MsgReportBadKey, task_id=st.integers(1, 12), proof=st.binary(min_size=96, max_size=96)),
        st.builds(market_pb2.MsgReportBadKey, task_id=small_id | u64, proof=st.binary(max_size=200))),
    "commit_round": either(  # plausible ones reach sampling; GPU ones pass only once enough validators declared
        st.builds(market_pb2.MsgCommitRound, task_id=st.integers(1, 12), round=st.integers(0, 2),
                  update_hash=st.binary(min_size=32, max_size=32), samples_processed=st.just(80),
                  steps=st.just(10), checkpoint_root=st.binary(min_size=32, max_size=32), num_checkpoints=st.just(3),
                  start_weights_hash=st.binary(min_size=32, max_size=32), determinism_profile=plausible_profile),
        st.builds(market_pb2.MsgCommitRound, task_id=small_id | u64, round=st.integers(0, 3) | u32,
                  update_hash=digest32, samples_processed=u64, steps=st.integers(0, 12) | u64,
                  checkpoint_root=digest32, num_checkpoints=st.integers(0, 4) | u32,
                  start_weights_hash=digest32, determinism_profile=text)),
    "submit_verdict": either(
        st.builds(market_pb2.MsgSubmitVerdict, task_id=st.integers(1, 12), round=st.integers(0, 2),
                  worker=known_address, segment=st.integers(0, 2), verdict=st.integers(1, 3),
                  evidence_hash=st.binary(min_size=32, max_size=32),
                  replay_commitment=st.binary(min_size=32, max_size=32)),
        st.builds(market_pb2.MsgSubmitVerdict, task_id=small_id | u64, round=st.integers(0, 3) | u32,
                  worker=address, segment=st.integers(0, 3) | u32, verdict=st.integers(0, 5),
                  evidence_hash=digest32, replay_commitment=digest32)),
    "reveal_replay": either(
        st.builds(market_pb2.MsgRevealReplay, task_id=st.integers(1, 12), round=st.integers(0, 2),
                  worker=known_address, segment=st.integers(0, 2), salt=st.binary(min_size=32, max_size=32),
                  replay_digest=st.binary(min_size=32, max_size=32)),
        st.builds(market_pb2.MsgRevealReplay, task_id=small_id | u64, round=st.integers(0, 3) | u32,
                  worker=address, segment=st.integers(0, 3) | u32, salt=digest32, replay_digest=digest32)),
    "declare_replay_gpus": either(
        st.builds(market_pb2.MsgDeclareReplayGpus, gpus=st.lists(st.sampled_from(PLAUSIBLE_GPUS), max_size=2,
                                                                 unique=True)),
        st.builds(market_pb2.MsgDeclareReplayGpus, gpus=st.lists(text, max_size=10))),
    "submit_proposal": either(
        st.builds(gov_pb2.MsgSubmitProposal, title=st.just("a proposal"), summary=st.just(""),
                  changes=st.lists(plausible_change, max_size=2), initial_deposit=st.sampled_from([0, 10**6, 10**7])),
        st.builds(gov_pb2.MsgSubmitProposal, title=text, summary=text, initial_deposit=u64,
                  changes=st.lists(plausible_change | hostile_change, max_size=40))),
    "deposit": either(st.builds(gov_pb2.MsgDeposit, proposal_id=st.integers(1, 6), amount=st.integers(1, 10**6)),
                      st.builds(gov_pb2.MsgDeposit, proposal_id=small_id | u64, amount=u64)),
    "vote": either(st.builds(gov_pb2.MsgVote, proposal_id=st.integers(1, 6), option=st.integers(1, 4)),
                   st.builds(gov_pb2.MsgVote, proposal_id=small_id | u64, option=st.integers(0, 6))),
}
"""Every message type of the chain, each with hostile contents (and plausible ones, to reach deep paths)."""


@st.composite
def any_message(draw):
    """One message of any type, or (rarely) a known type_url whose value is garbage bytes."""
    if draw(st.integers(0, 19)) == 0:
        kind = draw(st.sampled_from(sorted(MESSAGES)))
        return (kind, draw(st.binary(max_size=64)))
    return draw(MESSAGES[draw(st.sampled_from(sorted(MESSAGES)))])


# -- signing -------------------------------------------------------------------------------------------------------
@dataclass
class Signers:
    """The funded keys and the nonce each will use next; `observe` moves them on from a block's results."""

    nonces: dict[bytes, int] = field(default_factory=lambda: {k.address: 0 for k in KEYS})
    by_address: dict[str, bytes] = field(default_factory=lambda: {encode_address(k.address): k.address
                                                                    for k in KEYS})

    def sign(self, signer: PrivateKey, messages: list, fee: int, memo: str = "") -> bytes:
        """A transaction carrying `messages` (protobuf messages, or (type name, garbage bytes) pairs)."""
        body = tx_pb2.TxBody(chain_id=CHAIN_ID, nonce=self.nonces[signer.address], fee=fee, memo=memo)
        for message in messages:
            if isinstance(message, tuple):
                kind, value = message
                body.messages.add(type_url=type_url_of(MESSAGES_BY_KIND[kind]), value=value)
            else:
                body.messages.add(type_url=type_url_of(message), value=message.SerializeToString(deterministic=True))
        body_bytes = body.SerializeToString(deterministic=True)
        envelope = tx_pb2.Tx(body_bytes=body_bytes, pubkey=signer.pubkey, signature=signer.sign(sign_bytes(body_bytes)))
        return envelope.SerializeToString(deterministic=True)

    def observe(self, events_per_tx: list[list[tuple[str, dict]]]) -> None:
        """Each result whose `tx` event names a signer consumed that signer's nonce."""
        for events in events_per_tx:
            for kind, attributes in events:
                if kind == "tx" and attributes.get("signer") in self.by_address:
                    self.nonces[self.by_address[attributes["signer"]]] += 1


MESSAGES_BY_KIND = {
    "send": bank_pb2.MsgSend(), "create_validator": staking_pb2.MsgCreateValidator(), "bond": staking_pb2.MsgBond(),
    "unbond": staking_pb2.MsgUnbond(), "unjail": slashing_pb2.MsgUnjail(), "delegate": staking_pb2.MsgDelegate(),
    "undelegate": staking_pb2.MsgUndelegate(), "redelegate": staking_pb2.MsgRedelegate(),
    "edit_validator": staking_pb2.MsgEditValidator(), "withdraw_rewards": distribution_pb2.MsgWithdrawRewards(),
    "register_worker": market_pb2.MsgRegisterWorker(),
    "update_worker": market_pb2.MsgUpdateWorker(), "unregister_worker": market_pb2.MsgUnregisterWorker(),
    "submit_task": market_pb2.MsgSubmitTask(), "cancel_task": market_pb2.MsgCancelTask(),
    "join_task": market_pb2.MsgJoinTask(), "leave_task": market_pb2.MsgLeaveTask(),
    "deliver_key": market_pb2.MsgDeliverKey(), "report_bad_key": market_pb2.MsgReportBadKey(),
    "commit_round": market_pb2.MsgCommitRound(),
    "submit_verdict": market_pb2.MsgSubmitVerdict(), "reveal_replay": market_pb2.MsgRevealReplay(),
    "declare_replay_gpus": market_pb2.MsgDeclareReplayGpus(),
    "submit_proposal": gov_pb2.MsgSubmitProposal(), "deposit": gov_pb2.MsgDeposit(), "vote": gov_pb2.MsgVote(),
}


@dataclass(frozen=True)
class PlannedTx:
    """A drawn transaction before signing: who signs, what, and the fee (most pay enough, some do not)."""

    signer_index: int
    messages: list
    fee: int
    memo: str


planned_tx = st.builds(
    PlannedTx,
    signer_index=st.integers(0, ACCOUNTS - 1),
    messages=st.one_of(*[st.lists(any_message(), min_size=1, max_size=1)] * 3,
                       st.lists(any_message(), min_size=1, max_size=3)),
    fee=st.one_of(*[st.just(100_000)] * 4, st.sampled_from([0, 1]), u64),
    memo=st.one_of(st.just(""), st.just(""), text),
)


def block_of_txs(max_txs: int = 40):
    """A block's worth of planned transactions, at most one per signer (so each gets the nonce it expects)."""
    return st.lists(planned_tx, max_size=max_txs, unique_by=lambda planned: planned.signer_index)


def sign_block(signers: Signers, planned: list[PlannedTx]) -> list[bytes]:
    return [signers.sign(KEYS[p.signer_index], p.messages, p.fee, p.memo) for p in planned]
