"""Tracing and metrics of jobs on every store: the trace context rides in the payload, sizes are asked."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from observe_helpers import Traced, scrape, value
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

import batchy
from batchy.jobs import Backend, Claimed, JobEvent, JobHook, JSONSerializer, Queue
from batchy.jobs._model import Message, decode, encode
from batchy_contrib.observe import otel, prometheus

from .conftest import fast_worker

LOADED: list[list[int]] = []


@batchy.batched(name="users")
async def users(ids: list[int]) -> list[str]:
    LOADED.append(ids)
    await asyncio.sleep(0)
    return [f"user {i}" for i in ids]


class Headers(JobHook):
    """What the worker read back from the store: each started job's headers."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def job_started(self, event: JobEvent) -> None:
        self.seen.append(dict(event.headers))


async def test_a_requests_trace_continues_into_the_job_it_enqueued(backend: Backend) -> None:
    LOADED.clear()
    traced = Traced()
    queue = Queue(backend)

    @queue.job(name="welcome")
    async def welcome(user_id: int) -> str:
        return await users(user_id)

    tracing = otel.instrument(queue, tracer_provider=traced.provider)
    headers = Headers()
    try:
        with traced.tracer.start_as_current_span("POST /signup"):
            handle = await welcome.enqueue(7)
        await fast_worker(queue, burst=True, hooks=[headers]).run()
    finally:
        tracing.uninstrument()
    assert await handle.result(timeout=10) == "user 7"
    assert LOADED == [[7]]

    request = traced.one("POST /signup")
    create, process = traced.one("create default"), traced.one("process default")
    call = traced.one("batch users")
    assert request.context is not None and create.context is not None
    assert process.context is not None
    trace_id = request.context.trace_id
    # One trace: the request, the producer span, the attempt, and the job's batch call.
    assert {s.context.trace_id for s in (create, process, call) if s.context} == {trace_id}
    assert create.parent is not None and create.parent.span_id == request.context.span_id
    assert process.parent is not None and process.parent.span_id == create.context.span_id
    assert [link.context.span_id for link in process.links] == [create.context.span_id]
    assert call.parent is not None and call.parent.span_id == process.context.span_id
    assert (create.kind, process.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    messaging = {
        "messaging.system": "batchy",
        "messaging.destination.name": "default",
        "messaging.message.id": handle.id,
        "batchy.job": "welcome",
    }
    assert dict(create.attributes or {}) == {
        **messaging,
        "messaging.operation.type": "create",
        "messaging.operation.name": "create",
    }
    assert dict(process.attributes or {}) == {
        **messaging,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "batchy.job.attempt": 1,
        "batchy.job.outcome": "done",
        "batchy.rounds": 1,
        "batchy.calls": 1,
    }
    # The store carried the W3C trace context of the producer span in the payload.
    ids = f"{trace_id:032x}-{create.context.span_id:016x}-{create.context.trace_flags:02x}"
    assert headers.seen == [{"traceparent": f"00-{ids}"}]
    traced.provider.shutdown()


async def test_each_attempt_is_a_consumer_span_of_the_same_producer(backend: Backend) -> None:
    traced = Traced()
    queue = Queue(backend)

    @queue.job(name="broken", retries=1, backoff=lambda done, error: 0.0)
    async def broken() -> None:
        raise ValueError("no such user")

    tracing = otel.instrument(queue, tracer_provider=traced.provider)
    try:
        await broken.enqueue()  # no current span: the job starts a trace of its own
        await fast_worker(queue, burst=True).run()
    finally:
        tracing.uninstrument()
    create = traced.one("create default")
    attempts = [s for s in traced.spans if s.name == "process default"]
    assert create.parent is None and create.context is not None
    # The retry's payload, written by the worker, still carries the producer's context.
    assert [s.parent.span_id for s in attempts if s.parent] == [create.context.span_id] * 2
    assert [dict(s.attributes or {})["batchy.job.attempt"] for s in attempts] == [1, 2]
    assert [dict(s.attributes or {})["batchy.job.outcome"] for s in attempts] == ["retry", "dead"]
    assert [s.status.description for s in attempts] == ["ValueError: no such user"] * 2
    assert [[e.name for e in s.events] for s in attempts] == [["exception"], ["exception"]]
    traced.provider.shutdown()


def test_headers_that_are_not_strings_are_dropped_not_fatal() -> None:
    serializer = JSONSerializer()
    payload = serializer.dumps(
        {"job": "welcome", "args": [], "headers": {"traceparent": "00-ab", "n": 1, "x": None}}
    )
    assert decode(Claimed("1", "default", payload), serializer).headers == {"traceparent": "00-ab"}
    payload = serializer.dumps({"job": "welcome", "headers": ["traceparent"]})
    assert decode(Claimed("2", "default", payload), serializer).headers == {}
    message = Message("3", "default", "welcome", [], {}, headers={"traceparent": "00-cd"})
    assert decode(Claimed("3", "default", encode(message, serializer)), serializer) == message


async def test_the_queue_metrics_are_the_stores_numbers(backend: Backend) -> None:
    queue = Queue(backend)

    @queue.job(name="later", queue="later")
    async def later(n: int) -> None: ...

    for n in range(3):
        await later.enqueue(n)
    await later.options(delay=3600).enqueue(99)
    registry = CollectorRegistry()
    server, _ = prometheus.start_http_server(0, queue, addr="127.0.0.1", registry=registry)
    try:
        # Scraped from another thread; the store is asked on this test's loop.
        got = await asyncio.to_thread(scrape, f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
    assert value(got, "batchy_store_up") == 1
    assert value(got, "batchy_queue_size", queue="later") == 3
    assert value(got, "batchy_queue_scheduled", queue="later") == 1
    assert value(got, "batchy_queue_running", queue="later") == 0
    assert value(got, "batchy_queue_latency_seconds", queue="later") > 0  # type: ignore[operator]
    assert value(got, "batchy_dead_jobs") == 0
    assert value(got, "batchy_workers_alive") == 0


async def test_a_job_hook_needs_only_the_methods_it_uses(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Any object with some of JobHook's methods is a hook: the events it has no
    method for pass it by, with nothing logged (each was an AttributeError traceback)."""
    finished: list[str] = []

    class OnlyFinished:  # no JobHook base, no job_enqueued or job_started
        def job_finished(self, event: JobEvent) -> None:
            finished.append(event.outcome)

    hook: Any = OnlyFinished()
    queue = Queue(backend, hooks=[hook])

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    with caplog.at_level(logging.DEBUG, logger="batchy"):
        await noop.enqueue()
        await fast_worker(queue, burst=True).run()  # the worker takes the queue's hooks
    assert finished == ["done"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
