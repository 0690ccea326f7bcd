"""Complete market answers for unit tests that need one without running a chain: each helper returns the JSON of
one answer (as `trolly.chain.market.queries` writes it) with the fields a test names changed, so that it reads
into its view (`trolly.wallet.market_views`).

    view = TaskView.from_answer(task_answer(status="open", members=[member_answer(index=0)]))
"""

from __future__ import annotations

from trolly.chain.crypto import encode_address


def address(label: int) -> str:
    """A well-formed address of its own for each small number."""
    return encode_address(bytes([label]) * 20)


def summary_answer(**changes) -> dict:
    answer = {"id": 7, "requester": address(1), "spec_hash": "ab" * 32, "status": "running", "phase": "verify",
              "round": 1, "rounds": 3, "workers_wanted": 3, "workers_joined": 3, "active_members": 3,
              "open_slots": 0, "replacements": 0,
              "reward_per_round": 1000, "collateral": 500, "budget": 5000, "escrow_remaining": 3740,
              "paid_workers": 1200, "paid_fees": 60, "refunded": 0, "final_weights_hash": ""}
    return answer | changes


def task_answer(**changes) -> dict:
    answer = summary_answer() | {
        "progress": "round 2 of 3", "samples_per_worker": 2, "round_blocks": 30, "inner_steps": 40, "batch_size": 32,
        "checkpoint_every": 10, "seed": 2026, "terms": {"validator_fee_bps": 200}, "created_height": 3,
        "join_deadline": 103, "started_height": 9, "ended_height": 0, "phase_deadline": 60, "cancel_requested": False,
        "private_data": False, "data_key_hash": "", "members": [], "round_details": []}
    return answer | changes


def member_answer(**changes) -> dict:
    answer = {"worker": address(2), "index": 0, "status": "active", "collateral": 500, "paid": 0, "penalized": 0,
              "slashed": 0, "rounds_passed": 0, "samples_paid": 0, "compensated": 0, "left_round": -1, "reason": "", "leaving": 0,
              "blob_url": "http://127.0.0.1:8700", "relay": "", "first_round": 0,
              "data_key_box": {"delivered_height": 0, "reported_height": 0}}
    return answer | changes


def vote_answer(**changes) -> dict:
    answer = {"segment": 0, "validator": address(9), "verdict": "pass", "evidence_hash": "ee" * 32, "height": 40,
              "replay_commitment": "cc" * 32, "replay_digest": ""}
    return answer | changes


def commitment_answer(**changes) -> dict:
    answer = {"worker": address(2), "update_hash": "aa" * 32, "samples_processed": 1280, "steps": 40,
              "checkpoint_root": "bb" * 32, "num_checkpoints": 5, "start_weights_hash": "dd" * 32,
              "determinism_profile": "torch-2.13.0+cpu/threads-1/isa-avx2/deterministic-ftz", "height": 30, "residual_hash": "ff" * 32,
              "outcome": "pending", "segments": [], "decisions": [], "paid": 0, "verdicts": [], "verdicts_deleted": False, "committees": [],
              "escalated": [], "drawn": [], "held_verifier_fee": 0, "reveal_deadline": 0}
    return answer | changes


def round_answer(**changes) -> dict:
    answer = {"round": 0, "start_weights_hash": "", "final_report": False, "commitments": []}
    return answer | changes
