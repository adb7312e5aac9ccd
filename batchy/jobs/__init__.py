"""Background jobs on the batchy engine: jobs running at once in one worker batch their loads.

::

    from batchy.jobs import Queue

    queue = Queue("jobs.db")

    @queue.job
    async def welcome(user_id: int) -> None:
        user = await users_by_id(user_id)
        ...

    await welcome.enqueue(42)          # then: batchy worker app:queue --concurrency 100
"""

from ._activity import Activity
from ._admin import Admin
from ._backend import COUNTS_KEPT, DEAD_MAX, DEAD_MAX_AGE, Backend
from ._cron import Cron, Every, Schedule
from ._errors import (
    ArgumentError,
    ConfigError,
    DelayError,
    JobDefinitionError,
    JobError,
    JobNotFound,
    JobStateError,
    JobTimeout,
    LeaseLost,
    PayloadError,
    SerializationError,
    TextError,
    UnknownJobError,
)
from ._fetch import parse_queues
from ._handle import DeadJobError, Handle, ResultNotKept, Running
from ._hooks import JobEvent, JobHook
from ._job import JobCall, JobType
from ._memory import MemoryBackend
from ._model import (
    Claimed,
    Claims,
    DeadJob,
    Envelope,
    Info,
    JobStatus,
    KeyInfo,
    Outcome,
    QueueInfo,
    WorkerInfo,
)
from ._queue import Periodic, Queue
from ._records import JobInfo, JobPage, PeriodicInfo, RunInfo, ShardInfo, StoredJob
from ._retry import DEFAULT_RETRIES, Backoff, NoRetry, Retry, sidekiq_backoff
from ._serializer import JSONSerializer, Serializer
from ._sharded import ShardedJob
from ._sqlite import SQLiteBackend
from ._worker import Worker

__all__ = [
    "COUNTS_KEPT",
    "DEAD_MAX",
    "DEAD_MAX_AGE",
    "DEFAULT_RETRIES",
    "Activity",
    "Admin",
    "ArgumentError",
    "Backend",
    "Backoff",
    "Claimed",
    "Claims",
    "ConfigError",
    "Cron",
    "DeadJob",
    "DeadJobError",
    "DelayError",
    "Envelope",
    "Every",
    "Handle",
    "Info",
    "JSONSerializer",
    "JobCall",
    "JobDefinitionError",
    "JobError",
    "JobEvent",
    "JobHook",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "JobStateError",
    "JobStatus",
    "JobTimeout",
    "JobType",
    "KeyInfo",
    "LeaseLost",
    "MemoryBackend",
    "NoRetry",
    "Outcome",
    "PayloadError",
    "Periodic",
    "PeriodicInfo",
    "Queue",
    "QueueInfo",
    "ResultNotKept",
    "Retry",
    "RunInfo",
    "Running",
    "SQLiteBackend",
    "Schedule",
    "ShardInfo",
    "ShardedJob",
    "SerializationError",
    "Serializer",
    "StoredJob",
    "TextError",
    "UnknownJobError",
    "Worker",
    "WorkerInfo",
    "parse_queues",
    "sidekiq_backoff",
]

# Tracebacks and reprs show the public path to import and catch (batchy.jobs.ConfigError),
# not the private module that defines the class.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and issubclass(_obj, BaseException):
        _obj.__module__ = __name__
del _name, _obj
