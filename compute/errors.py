"""One exception tree for every expected failure of the compute runtime.

A bad spec, a blob whose bytes do not match its hash, a checkpoint that does not decode: each raises a
subclass of `ComputeError` with a message that says what was wrong. Anything else escaping `compute` is a bug.
"""


class ComputeError(Exception):
    """Base of every expected failure in `trolly.compute`."""


class SpecError(ComputeError):
    """The task spec is malformed or names something this runtime does not know."""


class BaseModelMissing(SpecError):
    """The spec's pinned base model is not installed here as pinned (package absent, another version, other
    weights): this process cannot derive the frozen weights, so it neither joins nor replays the task."""


class DeterminismError(ComputeError):
    """The running process cannot honour the requested determinism profile."""


class WasmKernelError(ComputeError):
    """The wasm32 kernel cannot train what it is given (a model other than an MLP classifier, a state of
    another shape), cannot be loaded, or its source does not build to the committed .wasm."""


class EncodingError(ComputeError):
    """Canonical tensor bytes (weights, checkpoints, shards) are malformed."""


class CheckpointError(ComputeError):
    """A checkpoint does not decode, or does not fit the model it is loaded into."""


class CodecError(ComputeError):
    """An update cannot be encoded or decoded with the named codec."""


class DatasetError(ComputeError):
    """A dataset manifest or shard is malformed or does not match its hash."""


class MerkleError(ComputeError):
    """A Merkle proof is malformed or asks for a leaf outside the tree."""


class RoundError(ComputeError):
    """A round's updates cannot be aggregated (no updates, mismatched shapes, zero samples)."""


class CheatError(ComputeError):
    """A cheat (the test switch's registry, `compute.cheats`) is unknown, cannot be loaded or registered, or
    lacks what it needs to play a round (another worker's round, its own previous one)."""
