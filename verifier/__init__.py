"""The verifier: validators replay sampled training segments and vote on chain.

A worker commits, per round, the Merkle root of its checkpoints (docs/protocol.md section 2). After the round
closes the chain draws, from a block hash that did not exist at commit time, which segments each worker must
have replayed (`sampling.py`). A validator's verifier fetches checkpoint i and i + 1 of each sampled segment
from the worker's blob service, checks them against the committed root, replays the segment with the same
`train_segment` the worker used (`segment_check.py`) and compares: bit for bit when the determinism profile matches,
within a calibrated tolerance otherwise (`tolerance.py`). It also checks the worker's claims (step count,
samples, checkpoint count) and the round's start weights against the deterministic aggregate of the previous
round (`claims.py`, `aggregation.py`). The service (`service.py`) follows the chain and signs one verdict per
segment; `cli.py` is `trolly-verifier`. The cheats the benchmark measures it against (and test workers play)
live in one registry beside the training code, `compute/cheats/`.
"""
