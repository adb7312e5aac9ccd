"""Runs one claimed job in its own scope and turns what happened into an :class:`Outcome`.

Nothing a payload or a handler does escapes this module as an exception: a
payload that does not decode, a job type the worker does not know, arguments
that no longer fit the handler, a handler that raises or times out, all become
outcomes (retry or dead, with a reason and a traceback). So bad data can never
crash a worker. That includes ``BaseException``: a handler raising
``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` or its own
``CancelledError`` has failed an attempt like any other; a stop by the worker
(it stops, or lost the lease) releases the job, and a cancel an operator asked
for (``batchy jobs cancel``) ends it: cancelled, not retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

import batchy
from batchy import _hooks as _engine_hooks

from ._activity import Tally
from ._errors import JobTimeout, LeaseLost, PayloadError, UnknownJobError
from ._failure import cancelled, describe, failed
from ._guard import Escaped, JobScope
from ._handle import Running
from ._hooks import JobEvent, emit, log
from ._model import Claimed, Message, Outcome, decode
from ._serializer import JSONSerializer

if TYPE_CHECKING:
    from ._hooks import JobHook
    from ._job import JobType
    from ._queue import Queue

__all__ = ["run_job"]


async def run_job(
    queue: Queue,
    claimed: Claimed,
    hooks: list[JobHook],
    tally: Tally,
    worker: str,
    lease: float,
    scope: JobScope,
) -> Outcome | None:
    """Run ``claimed`` to an outcome; a cancelled job raises ``CancelledError`` (shutdown).

    ``None`` when the worker lost the job's lease and its handler stopped
    (:class:`LeaseLost`), or when ``scope.fresh()`` says the lease ran out before
    the handler began: the job belongs to another worker, whose word counts.
    When ``scope.cancel_requested()`` is true by the time the handler stops with
    an exception, an operator cancelled the run: the outcome is the dead set, marked
    cancelled, whatever the handler raised on its way out. When
    ``scope.stop_requested()`` is true, the worker stopped the run (it stops, or
    lost the lease): its ``CancelledError`` goes on up, and the job is released,
    not failed.
    """
    start = time.perf_counter()
    try:
        message = decode(claimed, queue.serializer)
        job = queue.jobs.get(message.job)
        if job is None:
            known = ", ".join(sorted(queue.jobs)) or "none"
            raise UnknownJobError(
                f"job {claimed.id} on queue {claimed.queue!r} names job type "
                f"{message.job!r}, which this worker's queue does not declare (it knows: "
                f"{known}); deploy the code that declares it, or import its module from "
                f"the one the worker loads, then `batchy dead retry {claimed.id}`"
            )
        problem = job.binding_problem(message.args, message.kwargs)
        if problem is not None:  # enqueue checks this, so the code changed since
            raise PayloadError(
                f"job {claimed.id} ({job.name}): its arguments no longer fit its handler "
                f"({problem}; it takes {job.describe_parameters()}), so no retry can "
                "succeed; was it enqueued by older code? Fix the handler or enqueue it "
                f"again; `batchy dead retry {claimed.id}` runs it once the handler fits"
            )
    except (PayloadError, UnknownJobError) as bad:
        log.warning("job %s %s dead: %s", claimed.id, claimed.queue, bad)
        return Outcome(
            claimed.id,
            "dead",
            queue=claimed.queue,
            payload=claimed.payload,
            reason=str(bad),
            traceback="",
            token=claimed.token,
        )
    # A worker paused (or a loop blocked) since the claim must not begin a run the
    # store has given to another worker (see _guard, which checks again as the
    # handler begins); checked here too, so such a run emits no events.
    if not scope.fresh():
        return None
    cancel_requested = scope.cancel_requested
    if cancel_requested():
        # Cancelled while it waited for a slot (claimed ahead): it never began.
        log.info("job %s %s cancelled by an operator before it began", message.id, message.job)
        return cancelled(
            queue, message, asyncio.CancelledError("before it began"), 0.0, claimed.token
        )
    attempt = message.attempt + 1
    stats = scope.stats
    # The worker's ``tally`` (one of its ``hooks``) is most often the only one:
    # then it is told directly, and no event is built (two a job cost a no-op
    # job more than its handler); other hooks get the events, the tally too.
    event: JobEvent | None = None
    if len(hooks) == 1 and hooks[0] is tally:
        tally.started(stats)
    else:
        event = JobEvent(
            message.id,
            message.job,
            message.queue,
            attempt,
            "started",
            headers=message.headers,
            stats=stats,
        )
        emit(hooks, "job_started", event)
    failure: BaseException | None = None
    try:
        args: Sequence[Any] = message.args
        if job.takes_running:  # the handle is made only for the handlers that take it
            args = (Running(queue, message, worker, lease, claimed.token), *args)
        result = await _call(job, message, args, scope)
    except LeaseLost as lost:
        # Not a warning here: the worker logs each lost lease once, whichever of a
        # heartbeat, a progress save or an outcome found it first.
        log.debug("job %s %s stopped: %s", message.id, message.job, lost)
        _ended(hooks, tally, event, message, stats, "lost", time.perf_counter() - start, lost)
        return None
    except BaseException as exc:
        if isinstance(exc, Escaped):
            exc = exc.error  # the handler's SystemExit or KeyboardInterrupt (see _guard)
        if cancel_requested():
            duration = time.perf_counter() - start
            outcome = cancelled(queue, message, exc, duration, claimed.token)
            log.info(
                "job %s %s attempt %d cancelled by an operator after %.3fs; not retried: "
                "it is in the dead set",
                message.id, message.job, attempt, duration,
            )  # fmt: skip
            _ended(hooks, tally, event, message, stats, "cancelled", duration, exc)
            return outcome
        if isinstance(exc, asyncio.CancelledError) and scope.stop_requested():
            duration = time.perf_counter() - start
            # "Stopped", not "released": the worker hands it back, or (killed, or
            # its lease lost) leaves it to the lease; it says which.
            log.info("job %s %s stopped after %.3fs (shutdown)", message.id, message.job, duration)
            _ended(hooks, tally, event, message, stats, "released", duration, None)
            raise
        failure = exc
        outcome, next_step = failed(queue, job, message, exc, claimed.token)
    else:
        outcome = _done(queue, job, message, result, claimed.token)
    duration = time.perf_counter() - start
    if failure is None:
        again = "" if attempt == 1 else f" (attempt {attempt})"
        log.info("job %s %s done in %.3fs%s", message.id, message.job, duration, again)
    else:
        log.info(
            "job %s %s attempt %d failed after %.3fs: %s; %s",
            message.id,
            message.job,
            attempt,
            duration,
            describe(failure),
            next_step,
        )
    _ended(hooks, tally, event, message, stats, outcome.kind, duration, failure)
    return outcome


def _ended(
    hooks: list[JobHook],
    tally: Tally,
    event: JobEvent | None,
    message: Message,
    stats: batchy.ScopeStats,
    outcome: str,
    duration: float,
    error: BaseException | None,
) -> None:
    """Tell the hooks how a run ended (``event``: its start's; None: the tally alone heard it)."""
    if event is None:
        tally.finished(message.queue, message.job, outcome, stats)
        return
    # Built field by field: dataclasses.replace costs more than a no-op job's handler.
    ended = JobEvent(
        event.id, event.job, event.queue, event.attempt, outcome, duration, error,
        event.headers, event.stats,
    )  # fmt: skip
    emit(hooks, "job_finished", ended)


async def _call(
    job: JobType[Any, Any], message: Message, args: Sequence[Any], scope: batchy.Scope
) -> Any:
    try:
        with scope:
            if job.timeout is None:
                return await _handler(job, args, message.kwargs)
            deadline = asyncio.timeout(job.timeout)
            try:
                async with deadline:
                    return await _handler(job, args, message.kwargs)
            except TimeoutError:
                if not deadline.expired():
                    raise  # the handler's own (a socket's, say): not our deadline
                raise JobTimeout(
                    f"job {message.id} ({job.name}) ran longer than its timeout of "
                    f"{job.timeout}s; raise timeout= on the job, or make it do less per run"
                ) from None
    except BaseException as error:
        if _engine_hooks.hooks and job.guarded_coroutine is not None:
            _report_failure(job, error)
        raise


def _report_failure(job: JobType[Any, Any], error: BaseException) -> None:
    """Tell the engine's hooks (``Hook.task_failed``) that an ``async def`` handler raised.

    A generator handler has a task of its own, which reports itself; an ``async
    def`` one is awaited inside its run's task, which ends well whatever the
    handler did. So that task reports it, named from now on as the handler.
    """
    task = asyncio.current_task()
    if isinstance(task, batchy.Task):
        task._func = job.fn
        _engine_hooks.emit_task_failed(task, error.error if isinstance(error, Escaped) else error)


def _handler(job: JobType[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Awaitable[Any]:
    """The handler's run, for the run's own batchy task to await.

    An ``async def`` handler is awaited as it is, inside that task: no second
    task to make, step and wait on. A generator handler needs a task of its own
    to step its yields; it is begun in this step, so one that never waits is
    done here, without a trip through the scheduler's queue.
    """
    if job.guarded_coroutine is not None:
        return job.guarded_coroutine(*args, **kwargs)
    task = job.guarded(*args, **kwargs)
    task.start_eagerly()
    return task


def _done(
    queue: Queue, job: JobType[Any, Any], message: Message, result: Any, token: str
) -> Outcome:
    kept: str | None = None
    if job.keep_result > 0:
        try:
            # The usual result of a job, None, is not worth a call to the encoder.
            none = result is None and type(queue.serializer) is JSONSerializer
            kept = "null" if none else queue.serializer.dumps(result)
        except (TypeError, ValueError) as error:
            log.warning(
                "job %s %s returned %r, which %s cannot serialize (%s); its result is not "
                "kept (result() raises ResultNotKept): return plain JSON values to keep it",
                message.id,
                job.name,
                result,
                type(queue.serializer).__name__,
                error,
            )
    return Outcome(
        message.id, "done", queue=message.queue, result=kept, keep=job.keep_result, token=token
    )
