"""The exceptions of the job system, all under :class:`batchy.BatchyError`.

    BatchyError
     +-- JobError                 base of everything below
          +-- JobDefinitionError  a job type or queue was declared the wrong way
          +-- SerializationError  arguments or a result do not fit the serializer (also a TypeError)
          +-- ArgumentError       arguments do not fit the handler's parameters (also a TypeError)
          +-- DelayError          a delay or run time is not a usable time (also a ValueError)
          +-- TextError           an id, queue or key holds text no store keeps (also a ValueError)
          +-- UnknownJobError     a payload names a job type this process does not know
          +-- PayloadError        a stored payload cannot be decoded
          +-- JobTimeout          a job ran longer than its ``timeout``
          +-- LeaseLost           a sharded job's worker lost its lease: another runs it now
          +-- ConfigError         a worker or CLI option is wrong
          +-- JobNotFound         an operator's action names a job id the store does not hold
          +-- JobStateError       an operator's action does not apply to the job's state

Every message names the job, queue or value and suggests a fix.
"""

from __future__ import annotations

from batchy import BatchyError

__all__ = [
    "ArgumentError",
    "ConfigError",
    "DelayError",
    "JobDefinitionError",
    "JobError",
    "JobNotFound",
    "JobStateError",
    "JobTimeout",
    "LeaseLost",
    "PayloadError",
    "SerializationError",
    "TextError",
    "UnknownJobError",
]


class JobError(BatchyError):
    """Base class of the errors raised by :mod:`batchy.jobs`."""


class JobDefinitionError(JobError):
    """A job type or queue was declared in a way the job system cannot honour."""


class SerializationError(JobError, TypeError):
    """A job's arguments (or result) cannot be serialized; nothing was enqueued."""


class ArgumentError(JobError, TypeError):
    """A job's arguments do not bind to its handler's parameters; nothing was enqueued."""


class DelayError(JobError, ValueError):
    """A delay, run time or wait is not a finite number of seconds >= 0 (or an aware datetime)."""


class TextError(JobError, ValueError):
    """A job's id, queue name or key holds text a store cannot keep: nothing was enqueued
    (or, given to look a job up, no job has it and the store was not asked)."""


class UnknownJobError(JobError):
    """A payload names a job type that is not registered on the worker's queue."""


class PayloadError(JobError):
    """A stored payload is not a job this worker can decode."""


class JobTimeout(JobError):
    """A job ran longer than its ``timeout`` and was cancelled."""


class LeaseLost(JobError):
    """This worker no longer holds the job's lease; it stops and leaves the job to its owner."""


class ConfigError(JobError):
    """A worker, backend or command-line option is invalid."""


class JobNotFound(JobError, LookupError):
    """An operator's action or lookup names a job id that is not in the store (nothing changed)."""


class JobStateError(JobError):
    """An operator's action does not apply to a job in its current state (nothing changed)."""
