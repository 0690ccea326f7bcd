"""TEST SWITCH ONLY: the one registry of cheats, the ways a worker can fake its round that verifiers must catch.

Everything that makes a worker cheat reads this registry, under one name per cheat: a worker started with
`trolly-worker start --cheat NAME` (and the localnet's `--cheat NAME`, which starts one), the verification
benchmark (`benchmarks/verification.py`, which measures how often each one is caught) and
`trolly-verifier cheats` (which lists them). It lives beside the training code it bends, in `compute`, so
the worker can use it; the verifier imports compute, never the other way round. A worker running a cheat
loses its collateral; nothing here is useful to an operator.

A cheat is a function with this signature, registered under a name:

    @register_cheat("bf16", "faked segments trained in bfloat16 autocast")
    def bf16(context: CheatContext) -> CheatedRound: ...

`CheatContext` gives it what an honest worker has for the round (a `Trainer` built from the task spec, the
round's start weights, its worker index, the round, the step count to claim) plus the segments it should
fake (`faked_segments`, chosen by the caller: a third of them in the benchmark, every one in a worker), a
`torch.Generator` for any randomness of its own, and two callables that produce other rounds it may copy
from (another worker's honest round, its own previous round). It returns a `CheatedRound`: every
checkpoint it will serve (`TrainingState`s, checkpoint 0 first), what it will claim (steps, samples, start
weights hash), which checkpoints it withholds, which bytes it forges, and which segments it faked (the
ground truth the benchmark scores against). `CheatedRound.publish()` turns that into the blobs, the listing,
the Merkle root and the update a worker serves and commits. `honest_round(context)` is the round as
`compute.training.run_round` trains it: the baseline, not a cheat.

Strategies that fake segment by segment are built with `segment_cheat(fake)`, where
`fake(context, segment, start_state) -> TrainingState` makes checkpoint i + 1 from checkpoint i (the trainer
is loaded at checkpoint i); honest segments around it use `train_segment` itself. `distortions.py` holds the
bent inner loop they share.

`load_cheat_module(path)` imports a Python file whose top level calls `register_cheat`, so new strategies can
be tried with `--cheat-module FILE` (the benchmark, `trolly-verifier cheats`) without changing either.
"""

from .registry import (CHEATS, Cheat, CheatContext, CheatedRound, PublishedRound, choose_faked_segments, get_cheat,
                       honest_round, load_cheat_module, register_cheat, segment_cheat)
from . import builtin  # noqa: F401  (registers the built-in strategies)

__all__ = ["CHEATS", "Cheat", "CheatContext", "CheatedRound", "PublishedRound", "choose_faked_segments", "get_cheat",
           "honest_round", "load_cheat_module", "register_cheat", "segment_cheat"]
