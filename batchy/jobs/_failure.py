"""What a failed or cancelled attempt becomes: a retry after a checked delay, or the dead set.

Attempts count from 1, the first run, everywhere: in the log, in
:class:`JobEvent`, in the dead job's reason ("failed 3 time(s)" after attempt 3).
``Message.attempt`` in a payload is the number of attempts that failed so far.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

from . import _clock
from ._model import Message, Outcome, encode
from ._retry import NoRetry, Retry
from ._times import delay_problem

if TYPE_CHECKING:
    from ._job import JobType
    from ._queue import Queue

__all__ = ["cancelled", "describe", "failed"]


def describe(error: BaseException) -> str:
    """``"ValueError: boom"``, even for an exception whose ``__str__`` raises."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception as bad:  # a handler's exception must not take the worker with it
        return f"{type(error).__name__}: <str() raised {type(bad).__name__}>"


def _trace(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(error))
    except Exception:
        return describe(error)


def failed(
    queue: Queue, job: JobType[Any, Any], message: Message, error: BaseException, token: str = ""
) -> tuple[Outcome, str]:
    """The outcome of an attempt that raised ``error``, and what comes next, for the log.

    ``token`` is the lease token of the claim the attempt ran under.
    """
    retries = job.retries if message.retries is None else message.retries
    message.error = describe(error)
    message.traceback = _trace(error)  # for `batchy jobs show` while it waits to retry
    message.cancelled = False  # a cancelled job retried from the dead set failed anew
    message.attempt += 1  # this attempt failed too
    if isinstance(error, NoRetry):
        why = "not retried: NoRetry"
    elif message.attempt > retries:
        why = f"retries={retries} exhausted"
    else:
        delay, problem = _delay(job, message.attempt - 1, error)
        if problem is None:
            retry = Outcome(
                message.id,
                "retry",
                queue=message.queue,
                payload=encode(message, queue.serializer, check_keys=False),
                due=_clock.now() + delay,
                token=token,
            )
            return retry, f"attempt {message.attempt + 1} in {delay:.1f}s"
        why = f"not retried: {problem}"
    count = f"failed {message.attempt} time(s)"
    dead = Outcome(
        message.id,
        "dead",
        queue=message.queue,
        payload=encode(message, queue.serializer, check_keys=False),
        reason=f"{message.error} ({count}; {why})",
        traceback=message.traceback,
        token=token,
    )
    return dead, f"dead: {count}; {why}"


def cancelled(
    queue: Queue, message: Message, error: BaseException, duration: float, token: str
) -> Outcome:
    """The outcome of an attempt an operator cancelled: the dead set, marked, never a retry.

    ``error`` is what ended the handler (its ``CancelledError``, or what it raised
    instead): its traceback shows where the run was stopped.
    """
    message.attempt += 1
    message.error = f"cancelled by an operator after {duration:.3f}s"
    message.traceback = _trace(error)
    message.cancelled = True
    return Outcome(
        message.id,
        "dead",
        queue=message.queue,
        payload=encode(message, queue.serializer, check_keys=False),
        reason=(
            f"{message.error} (attempt {message.attempt}; not retried: cancelled; "
            f"`batchy dead retry {message.id}` runs it again)"
        ),
        traceback=message.traceback,
        token=token,
    )


def _delay(job: JobType[Any, Any], done: int, error: BaseException) -> tuple[float, str | None]:
    """Seconds until the next attempt (``done`` retries so far), or why there is none."""
    if isinstance(error, Retry) and error.delay is not None:
        delay: object = error.delay
        source = "Retry gave delay="
    else:
        try:
            delay = job.backoff(done, error)
        except Exception as bad:
            return 0.0, f"its backoff raised {describe(bad)}; fix backoff= on the job"
        source = "its backoff gave "
    # A NaN or infinite delay would reach the store and fail every outcome with it.
    problem = delay_problem(delay)
    if problem is not None:
        return 0.0, f"{source}{delay!r}, which {problem}; a delay is seconds >= 0"
    return float(delay), None  # type: ignore[arg-type]  # a Real, checked above
