"""One exception tree for the verifier's expected failures.

A verdict on a segment is not an error: a cheat is reported as a FAIL verdict with its numbers. These are the
failures that stop the verifier from reaching a verdict at all: bad configuration, a spec it cannot run, a
node that does not answer, a vote record that cannot be written.
"""


class VerifierError(Exception):
    """Base of every expected failure in `trolly.verifier`."""


class ConfigurationError(VerifierError):
    """The verifier's options or home directory are unusable (missing key, bad path, bad number)."""


class WorkUnavailable(VerifierError):
    """What a segment needs (spec, dataset, checkpoints) could not be fetched after the retries."""


class VoteRecordError(VerifierError):
    """The persisted record of votes cannot be read or written."""
