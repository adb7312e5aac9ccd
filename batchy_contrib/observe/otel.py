"""OpenTelemetry tracing: a span per batch call, linked to the spans it served, and traced jobs.

::

    from batchy_contrib.observe import otel

    otel.instrument(queue)      # before building workers; queues are optional

Everything comes from batchy's hooks (:class:`batchy.Hook` and
:class:`batchy.jobs.JobHook`); nothing is imported or paid for until
:func:`instrument` is called. What it records:

- **Batch calls.** Each call of a batch function is a span ``batch <loader>``
  with ``batchy.loader``, ``batchy.keys`` (how many), ``batchy.chunk``,
  ``batchy.round`` and ``batchy.outcome`` (``ok`` or ``error``; a failed call
  records its exception and has status ERROR). A call answers the loads of
  one or more *scopes* (a request, a job, a ``batchy.run``), and each scope
  works for the span that was current where it was entered: the call links to
  those spans, and is a child of the first, so a page served alone shows its
  batch calls in its own trace and a call shared by two requests is found
  from both.
- **Rounds.** Each round adds an event ``batchy.round`` (``batchy.round``,
  ``batchy.loaders``, ``batchy.keys``) to the span of every scope with keys in it.
- **Jobs**, after OpenTelemetry's messaging conventions (``messaging.system``
  ``batchy``, ``messaging.destination.name`` the queue, ``messaging.message.id``
  the job id): enqueueing makes a PRODUCER span ``create <queue>``, a child of
  the current span, and writes its W3C trace context (``traceparent``) into
  the job's headers, which every store carries inside the payload. Each attempt
  on a worker is a CONSUMER span ``process <queue>``, a child of and linked to
  that producer span, current while the job's handler runs: a web request's
  trace goes on into the jobs it enqueued, and the job's batch calls into it.
"""

from __future__ import annotations

import importlib.metadata
import time
from contextvars import ContextVar, Token
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[otel]'", "opentelemetry"):
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider

import batchy
from batchy.jobs import JobEvent, JobHook, Queue

__all__ = ["Tracing", "instrument"]

#: ``messaging.system`` of job spans.
SYSTEM = "batchy"


class Tracing(batchy.Hook, JobHook):
    """The hook that turns batchy's events into spans; made and registered by :func:`instrument`."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("batchy", _version(), tracer_provider)
        # scope -> the span it works for. Held from the scope's outermost ``with``
        # block until it exits, so nothing outlives the request or job.
        self._spans: dict[batchy.Scope, Span] = {}
        # The running attempt's consumer span and the context token to detach, in
        # the job's own asyncio task, where job_started and job_finished are called
        # (two runs of one job, its lease lost, never mix them up).
        self._job: ContextVar[tuple[Span, Token[otel_context.Context]] | None] = ContextVar(
            "batchy_otel_job", default=None
        )
        self.queues: list[Queue] = []

    def uninstrument(self) -> None:
        """Stop tracing: unregister from the engine and from the queues."""
        batchy.remove_hook(self)
        for queue in self.queues:
            if self in queue.hooks:
                queue.hooks.remove(self)
        self.queues.clear()

    # -- the engine -------------------------------------------------------------------

    def scope_entered(self, scope: batchy.Scope) -> None:
        span = trace.get_current_span()
        if span.get_span_context().is_valid:
            self._spans[scope] = span

    def scope_exited(self, scope: batchy.Scope) -> None:
        self._spans.pop(scope, None)

    def round_started(self, event: batchy.RoundEvent) -> None:
        attributes: dict[str, Any] | None = None
        for scope in event.scopes:
            span = self._spans.get(scope)
            if span is None or not span.is_recording():
                continue
            if attributes is None:
                attributes = {
                    "batchy.round": event.number,
                    "batchy.loaders": list(event.loaders),
                    "batchy.keys": event.keys,
                }
            span.add_event("batchy.round", attributes)

    def batch_flushed(self, event: batchy.BatchEvent) -> None:
        served = [s for s in map(self._spans.get, event.scopes) if s is not None]
        # The event comes when the call has ended; its start is that less its duration.
        end = time.time_ns()
        start = end - int(event.duration * 1e9)
        # No served span: a root span, never a child of whatever happens to be
        # current in the event loop callback that finished the call.
        parent = trace.set_span_in_context(served[0]) if served else otel_context.Context()
        span = self.tracer.start_span(
            f"batch {event.loader}",
            context=parent,
            links=[Link(s.get_span_context()) for s in served],
            start_time=start,
            attributes={
                "batchy.loader": event.loader,
                "batchy.keys": len(event.keys),
                "batchy.chunk": event.chunk,
                "batchy.round": event.round,
                "batchy.outcome": "ok" if event.error is None else "error",
            },
        )
        if event.error is not None:
            _failed(span, event.error, end)
        span.end(end_time=end)

    # -- jobs -------------------------------------------------------------------------

    def job_enqueued(self, event: JobEvent) -> None:
        span = self.tracer.start_span(
            f"create {event.queue}",
            kind=SpanKind.PRODUCER,
            attributes=_messaging(event, "create"),
        )
        # The producer span's context, as ``traceparent`` (and whatever else the
        # configured propagators write), travels in the job's payload.
        propagate.inject(event.headers, context=trace.set_span_in_context(span))
        span.end()

    def job_started(self, event: JobEvent) -> None:
        creation = propagate.extract(event.headers)
        sent = trace.get_current_span(creation).get_span_context()
        span = self.tracer.start_span(
            f"process {event.queue}",
            context=creation,  # no trace context: a root span
            kind=SpanKind.CONSUMER,
            links=[Link(sent)] if sent.is_valid else [],
            attributes={**_messaging(event, "process"), "batchy.job.attempt": event.attempt},
        )
        # Current in the job's own asyncio task from here to job_finished: the
        # job's scope is entered in it, so its batch calls link to this span.
        token = otel_context.attach(trace.set_span_in_context(span))
        self._job.set((span, token))

    def job_finished(self, event: JobEvent) -> None:
        entry = self._job.get()
        if entry is None:
            return
        self._job.set(None)
        span, token = entry
        span.set_attribute("batchy.job.outcome", event.outcome)
        if event.stats is not None:
            span.set_attributes(
                {
                    "batchy.rounds": event.stats.rounds,
                    "batchy.calls": sum(event.stats.calls.values()),
                }
            )
        if event.error is not None and event.outcome in ("retry", "dead"):
            _failed(span, event.error, time.time_ns())
        span.end()
        otel_context.detach(token)


def _version() -> str | None:
    try:
        return importlib.metadata.version("batchy")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return None


def _messaging(event: JobEvent, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": event.queue,
        "messaging.message.id": event.id,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "batchy.job": event.job,
    }


def _failed(span: Span, error: BaseException, when: int) -> None:
    span.record_exception(error, timestamp=when)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def instrument(*queues: Queue, tracer_provider: TracerProvider | None = None) -> Tracing:
    """Trace batch calls and rounds in this process, and the jobs of ``queues``.

    Call it before making workers (a worker copies its queue's hooks when it is
    made). ``tracer_provider`` defaults to the global one. Returns the hook;
    ``.uninstrument()`` stops tracing.
    """
    for queue in queues:
        if not isinstance(queue, Queue):
            raise batchy.UsageError(
                f"otel.instrument() takes batchy.jobs.Queue objects to trace jobs of, got "
                f"{batchy.short_repr(queue)} ({type(queue).__name__}); pass the Queue your "
                "jobs are declared on, or nothing to trace batch calls only"
            )
    tracing = Tracing(tracer_provider)
    batchy.add_hook(tracing)
    for queue in queues:
        queue.hooks.append(tracing)
        tracing.queues.append(queue)
    return tracing
