"""Cheat strategies: a registry of ways a worker can fake its round, for the benchmark and for test workers.

A cheat is a function with this signature, registered under a name:

    @register_cheat("bf16", "faked segments trained in bfloat16 autocast")
    def bf16(context: CheatContext) -> CheatedRound: ...

`CheatContext` gives it what an honest worker has for the round (a `Trainer` built from the task spec, the
round's start weights, its worker index, the round, the step count to claim) plus the segments it should
fake (`faked_segments`, chosen by the caller), a `torch.Generator` for any randomness of its own, and two
callables that produce other rounds it may copy from (another worker's honest round, its own previous
round). It returns a `CheatedRound`: every checkpoint it will serve (`TrainingState`s, checkpoint 0 first),
what it will claim (steps, samples, start weights hash), which checkpoints it withholds, and which segments
it faked (the ground truth the benchmark scores against). `CheatedRound.publish()` turns that into the blobs,
the listing and the Merkle root a worker serves and commits.

Strategies that fake segment by segment are built with `segment_cheat(fake)`, where
`fake(context, segment, start_state) -> TrainingState` makes checkpoint i + 1 from checkpoint i (the trainer
is loaded at checkpoint i); honest segments around it use `train_segment` itself.

`load_cheat_module(path)` imports a Python file whose top level calls `register_cheat`, so new strategies
can be tried with `--cheat-module FILE` without changing the benchmark or the worker. A worker started with
`--cheat NAME` picks its faked segments with `choose_faked_segments(n, fraction, generator)`, calls
`get_cheat(NAME)(context)` instead of `compute.training.run_round`, and serves and commits what `publish()`
gives (the listing, the blobs except the withheld ones, the root, `steps`, `samples_processed`,
`start_weights_hash`); its update is the last checkpoint's weights subtracted from the start weights.
"""

from .registry import (CHEATS, Cheat, CheatContext, CheatedRound, PublishedRound, choose_faked_segments, get_cheat,
                       honest_round, load_cheat_module, register_cheat, segment_cheat)
from . import builtin  # noqa: F401  (registers the built-in strategies)

__all__ = ["CHEATS", "Cheat", "CheatContext", "CheatedRound", "PublishedRound", "choose_faked_segments", "get_cheat",
           "honest_round",
           "load_cheat_module", "register_cheat", "segment_cheat"]
