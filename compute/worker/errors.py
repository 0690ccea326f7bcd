"""What can go wrong in the worker service, one class per case, under `WorkerError`.

Expected failures (a bad home, a key that is not there, a task whose spec this runtime cannot train, weights
that disagree with the chain) raise a subclass with a message an operator can act on. Errors of the layers
below keep their own types: `ComputeError` (compute runtime, blobs) and `WalletError` (keys, node, txs).
"""

from ..errors import ComputeError


class WorkerError(ComputeError):
    """Base of every expected failure of `trolly-worker`."""


class WorkerHomeError(WorkerError):
    """The worker home is missing, not initialised, or its files are malformed."""


class TaskUnfit(WorkerError):
    """This worker cannot train the task (unknown model or codec, mismatched determinism profile...)."""


class DataKeyWaiting(WorkerError):
    """A private task this worker joined, whose data key the requester has not delivered yet: it waits (a key
    that does not come in time releases the worker without penalty, docs/privacy.md)."""


class WeightsMismatch(WorkerError):
    """The global weights this worker computed differ from what the chain agreed, or an update is missing."""


class LeaveRefused(WorkerError):
    """`trolly-worker leave` was not sent: the worker is not an active member of a live task, is already
    leaving it, or the operator said no."""
