"""The handle enqueue returns: a job's id, and a way to ask for its state and result."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from . import _clock
from ._errors import JobError

if TYPE_CHECKING:
    from ._model import JobStatus
    from ._queue import Queue

__all__ = ["DeadJobError", "Handle", "ResultNotKept"]


class DeadJobError(JobError):
    """The job a handle waits on went to the dead set."""


class ResultNotKept(JobError):
    """The job is unknown to the store: never enqueued there, or done with its result not kept."""


class Handle:
    """A job that was enqueued: ``id``, ``await status()``, ``await result()``."""

    __slots__ = ("id", "queue", "queue_name")

    def __init__(self, queue: Queue, job_id: str, queue_name: str) -> None:
        self.queue = queue
        self.id = job_id
        self.queue_name = queue_name

    def __repr__(self) -> str:
        return f"<batchy.jobs.Handle {self.id} queue={self.queue_name or '?'}>"

    async def status(self) -> JobStatus:
        """Where the job is now (``.state``: queued, scheduled, running, retrying, done, dead)."""
        return await self.queue.backend.status(self.id, _clock.now())

    async def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the job to finish and return its result (results are kept ``keep_result``).

        Raises :class:`DeadJobError` if it died, :class:`ResultNotKept` if the store
        does not know it, and ``TimeoutError`` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = await self.status()
            if status.state == "done":
                if status.result is None:
                    return None
                return self.queue.serializer.loads(status.result)
            if status.state == "dead":
                raise DeadJobError(
                    f"job {self.id} is dead: {status.reason}; see `batchy dead list` and "
                    "retry it with `batchy dead retry ID` once fixed"
                )
            if status.state == "unknown":
                raise ResultNotKept(
                    f"job {self.id} is not known to {self.queue.backend!r}: it was never "
                    "enqueued there, or it finished and its result was not kept; set "
                    "keep_result= (seconds) on the job or the queue to keep results"
                )
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {self.id} is still {status.state} after {timeout}s; wait longer, "
                    "or check that a worker runs its queue (`batchy info`)"
                )
            await asyncio.sleep(poll)
