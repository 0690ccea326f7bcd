"""The final report's check: the final weights a member reports must be W_R as this verifier derives it.

After the last training round settles, each member reports the hash of the final weights W_R
(`CommitRound{round: R, start_weights_hash}`, docs/protocol.md 4.2). The chain samples one check per report
(`chain.market.records.FINAL_REPORT_SEGMENT`) for a committee that derives W_R itself, from the last verified
start and the last round's passed updates (`compute/weights_follower.py`): a report of any other hash is
FAIL and its member is slashed like one that faked a segment; only a hash verification passed becomes the
task's `final_weights_hash`, the weights `trolly-wallet task fetch` hands back. A verifier that cannot derive
W_R votes UNAVAILABLE (the service), never taking the report's word for it.

The vote commits to sha256(tag || the derived hash) (`evidence.py`): only a verifier that derived W_R knows
it when the report is false.
"""

from __future__ import annotations

import hashlib

from . import evidence
from .segment_check import FAILED, PASSED, SegmentClaim, SegmentReport

FINAL_TAG = b"trolly/final-weights/v1"


def verify_final_report(claim: SegmentClaim, derived_final_hash: bytes) -> SegmentReport:
    """PASS when the reported final weights hash (the claim's `start_weights_hash`) is the derived W_R's."""
    details = {evidence.DETAIL: hashlib.sha256(FINAL_TAG + derived_final_hash).hexdigest(),
               "derived_final_weights_hash": derived_final_hash.hex()}
    if claim.start_weights_hash == derived_final_hash:
        return SegmentReport(claim, PASSED, "the reported final weights are W_R as derived here", details=details)
    return SegmentReport(claim, FAILED, f"reported final weights {claim.start_weights_hash.hex()[:16]}... are not W_R "
                                        f"{derived_final_hash.hex()[:16]}..., derived here from the last verified "
                                        f"start and the last round's passed updates", details=details)
