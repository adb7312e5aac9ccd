"""What a job's code holds of it: the :class:`Handle` enqueue returns, and the :class:`Running` job.

Both reach the store through the queue that owns the job, but only through its
``backend`` and ``serializer`` (the :class:`Store` protocol), so this module sits
below the queue and the worker, and neither is imported from here.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from . import _clock
from ._errors import DelayError, JobError
from ._times import delay_problem
from ._waiters import Waiter

if TYPE_CHECKING:
    from ._backend import Backend
    from ._model import JobStatus, Message
    from ._serializer import Serializer

__all__ = ["DeadJobError", "Handle", "ResultNotKept", "Running", "Store"]


class Store(Protocol):
    """What a handle or a running job needs of its :class:`~batchy.jobs.Queue`."""

    @property
    def backend(self) -> Backend: ...
    @property
    def serializer(self) -> Serializer: ...


class DeadJobError(JobError):
    """The job a handle waits on went to the dead set."""


class ResultNotKept(JobError):
    """The job is unknown to the store: never enqueued there, or done with its result not kept."""


class Handle:
    """A job that was enqueued: ``id``, ``await status()``, ``await result()``."""

    __slots__ = ("id", "queue", "queue_name")

    def __init__(self, queue: Store, job_id: str, queue_name: str) -> None:
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
        does not know it or its result could not be kept, and ``TimeoutError`` after
        ``timeout`` seconds (<= 0: read once). The job is read at least every
        ``poll`` seconds (finite, > 0); a NaN timeout or such a poll raises
        :class:`DelayError`. The waiters of one store in one event loop share their
        reads: one per the smallest ``poll`` among them, however many wait.
        """
        _check_wait(self.id, timeout, poll)
        # Like asyncio.timeout(), a timeout <= 0 reads the job once; infinity is none.
        deadline = math.inf
        if timeout is not None and timeout != math.inf:
            deadline = time.monotonic() + timeout
        waiter = Waiter(self.queue.backend, self.id, poll, deadline)
        try:
            while True:
                status = await waiter.next()
                if status.state == "done":
                    if status.result is None:  # (a None result is kept as "null")
                        raise ResultNotKept(
                            f"job {self.id} finished, but its result could not be kept (it "
                            "did not serialize, or was too long for the store; the worker "
                            "logged which): return plain JSON values, a reference to large data"
                        )
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
                # The read at the deadline is the last (a poll longer than the timeout
                # is cut to it: see _waiters).
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"job {self.id} is still {status.state} after {timeout}s; wait "
                        "longer, or check that a worker runs its queue (`batchy info`)"
                    )
        finally:
            waiter.leave()


def _check_wait(job_id: str, timeout: object, poll: object) -> None:
    """Raise :class:`DelayError` for a ``result()`` wait that would hang or hammer the store.

    NaN compares false with every deadline, so ``timeout=nan`` waited forever; a
    ``poll`` of 0 or less read the store in a busy loop (tens of thousands of
    reads a second), and an infinite one never read it again.
    """
    if timeout is not None and timeout != math.inf:
        # A negative timeout reads the job once, as asyncio.timeout() does: its size is
        # what must be a number of seconds.
        size = -timeout if isinstance(timeout, numbers.Real) and timeout < 0 else timeout
        problem = delay_problem(size)
        if problem is not None:
            raise DelayError(
                f"job {job_id}: result(timeout={timeout!r}) {problem}; give a number of "
                "seconds (timeout=10), or None to wait until the job ends"
            )
    problem = delay_problem(poll)
    if problem is None and poll == 0:
        problem = "is 0"
    if problem is not None:
        raise DelayError(
            f"job {job_id}: result(poll={poll!r}) {problem}; give the seconds between two "
            "reads of the store, finite and > 0 (the default 0.05 reads it 20 times a second)"
        )


@dataclass(slots=True)
class Running:
    """A claimed job as its handler may see it (job types with ``takes_running``).

    ``message`` is live: what the handler changes in it (a sharded job's cursor in
    its arguments) is what a retry stores. ``token`` is the claim's lease token,
    which a progress save must carry.
    """

    queue: Store
    message: Message
    worker: str
    lease: float
    token: str = ""
