"""OpenTelemetry tracing of the engine: the exact spans, links, events and attributes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trace_blog
from observe_helpers import Traced
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import batchy
from batchy.jobs import MemoryBackend, Queue
from batchy_contrib.observe import otel


def link_ids(span: ReadableSpan) -> list[int]:
    return [link.context.span_id for link in span.links]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def test_the_blog_page_is_four_batch_spans_and_three_round_events_in_its_span() -> None:
    spans = trace_blog.trace_page(posts=50, comments=20, users=200)
    page = next(s for s in spans if s.name == "GET /blog")
    batches = sorted(
        (s for s in spans if s is not page),
        key=lambda s: ((s.attributes or {})["batchy.round"], s.name),
    )
    # What the page asked for: 50 posts, their comment ids, 1,000 comments, their authors.
    blog = __import__("batchy_example_blog")
    authors = len({c["user_id"] for c in blog.db.tables["comments"].values()})
    assert [(s.name, dict(s.attributes or {})) for s in batches] == [
        (f"batch {loader}", {
            "batchy.loader": loader,
            "batchy.keys": keys,
            "batchy.chunk": 0,
            "batchy.round": round_,
            "batchy.outcome": "ok",
        })
        for loader, keys, round_ in [
            ("comment_ids_by_post", 50, 1),
            ("posts_by_id", 50, 1),
            ("comments_by_id", 1000, 2),
            ("users_by_id", authors, 3),
        ]
    ]  # fmt: skip
    for span in batches:
        assert span.kind is SpanKind.INTERNAL
        assert parent_id(span) == span_id(page)  # in the page's trace ...
        assert link_ids(span) == [span_id(page)]  # ... and linked to the span it served
        assert span.status.status_code is StatusCode.UNSET
        assert page.start_time <= span.start_time <= span.end_time <= page.end_time  # type: ignore[operator]
    assert [(e.name, dict(e.attributes or {})) for e in page.events] == [
        ("batchy.round", {"batchy.round": 1, "batchy.loaders": ("posts_by_id", "comment_ids_by_post"), "batchy.keys": 100}),
        ("batchy.round", {"batchy.round": 2, "batchy.loaders": ("comments_by_id",), "batchy.keys": 1000}),
        ("batchy.round", {"batchy.round": 3, "batchy.loaders": ("users_by_id",), "batchy.keys": authors}),
    ]  # fmt: skip
    assert page.parent is None and len(spans) == 5


def test_the_example_prints_the_tree(capsys: pytest.CaptureFixture[str]) -> None:
    trace_blog.main(["--posts", "2", "--comments", "1", "--users", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        "GET /blog",
        "  . round 1: posts_by_id, comment_ids_by_post",
        "  . round 2: comments_by_id",
        "  . round 3: users_by_id",
    ]
    assert sorted(lines[4:]) == [
        "  batch comment_ids_by_post keys=2 links=1",
        "  batch comments_by_id keys=2 links=1",
        "  batch posts_by_id keys=2 links=1",
        "  batch users_by_id keys=1 links=1",
    ]


@batchy.batched(name="users", max_batch_size=2)
async def users(ids: list[int]) -> list[str]:
    await asyncio.sleep(0)
    if 13 in ids:
        raise ConnectionError("users server went away")
    return [f"user {i}" for i in ids]


def test_a_call_shared_by_two_requests_links_both_and_lives_in_the_first(traced: Traced) -> None:
    async def request(name: str, ids: list[int]) -> Any:
        with traced.tracer.start_as_current_span(name):
            async with batchy.scope():
                return await users.many(ids)

    async def main() -> None:
        await asyncio.gather(request("GET /a", [1]), request("GET /b", [1, 2, 3]))

    tracing = otel.instrument(tracer_provider=traced.provider)
    try:
        asyncio.run(main())
    finally:
        tracing.uninstrument()
    a, b = traced.one("GET /a"), traced.one("GET /b")
    calls = sorted(
        (s for s in traced.spans if s.name == "batch users"),
        key=lambda s: (s.attributes or {})["batchy.chunk"],
    )
    assert [(c.name, (c.attributes or {})["batchy.chunk"], (c.attributes or {})["batchy.keys"]) for c in calls] == [
        ("batch users", 0, 2),
        ("batch users", 1, 1),
    ]  # fmt: skip
    # Keys 1, 2 (asked by both) in chunk 0; key 3 (only b) in chunk 1.
    assert link_ids(calls[0]) == [span_id(a), span_id(b)]
    assert parent_id(calls[0]) == span_id(a)
    assert link_ids(calls[1]) == [span_id(b)]
    assert parent_id(calls[1]) == span_id(b)
    assert (
        [e.attributes for e in a.events]
        == [e.attributes for e in b.events]
        == [{"batchy.round": 1, "batchy.loaders": ("users",), "batchy.keys": 3}]
    )


def test_a_failed_call_records_its_error(traced: Traced) -> None:
    @batchy.task
    def page() -> Any:
        try:
            yield users(13)
        except batchy.LoaderError:
            return "fallback"

    tracing = otel.instrument(tracer_provider=traced.provider)
    try:
        with traced.tracer.start_as_current_span("GET /page"):
            assert batchy.run(page()) == "fallback"
    finally:
        tracing.uninstrument()
    call = traced.one("batch users")
    assert (call.attributes or {})["batchy.outcome"] == "error"
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == (
        "LoaderError: loader 'users' raised ConnectionError: users server went away "
        "while loading keys [13]"
    )
    [event] = call.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"].endswith("LoaderError")  # type: ignore[union-attr]


def test_without_a_current_span_a_call_is_a_root_span(traced: Traced) -> None:
    tracing = otel.instrument(tracer_provider=traced.provider)
    try:
        batchy.run(users(1))
    finally:
        tracing.uninstrument()
    call = traced.one("batch users")
    assert call.parent is None and call.links == ()


def test_uninstrument_stops_tracing(traced: Traced) -> None:
    queue = Queue(MemoryBackend())
    tracing = otel.instrument(queue, tracer_provider=traced.provider)
    assert tracing in queue.hooks
    tracing.uninstrument()
    assert tracing not in queue.hooks
    batchy.run(users(1))
    assert traced.spans == []


def test_instrument_takes_queues_only() -> None:
    with pytest.raises(batchy.UsageError) as info:
        otel.instrument("jobs.db")  # type: ignore[arg-type]
    assert str(info.value) == (
        "otel.instrument() takes batchy.jobs.Queue objects to trace jobs of, got 'jobs.db' "
        "(str); pass the Queue your jobs are declared on, or nothing to trace batch calls only"
    )


def test_a_job_enqueued_in_a_handler_joins_its_own_requests_trace(traced: Traced) -> None:
    """Concurrent requests share the scheduler; each handler runs in its request's context.

    Before handlers ran in their tree's context, every request's handlers ran in
    the context of whichever request woke the scheduler: request b's job joined
    request a's trace.
    """
    queue = Queue(MemoryBackend())

    @queue.job(name="notify")
    async def notify(user: str) -> None:
        pass

    @batchy.task
    async def signup(user_id: int) -> str:
        user = await users(user_id)  # a round: both requests' handlers wait on it
        await notify.enqueue(user)
        return user

    async def request(name: str, user_id: int) -> str:
        with traced.tracer.start_as_current_span(name):
            async with batchy.scope():
                return await signup(user_id)

    async def main() -> list[str]:
        return list(await asyncio.gather(request("POST /a", 1), request("POST /b", 2)))

    tracing = otel.instrument(queue, tracer_provider=traced.provider)
    try:
        assert asyncio.run(main()) == ["user 1", "user 2"]
    finally:
        tracing.uninstrument()
    creates = [s for s in traced.spans if s.name == "create default"]
    by_user = {}
    for span in creates:
        assert span.parent is not None and span.context is not None
        by_user[span.parent.span_id] = span.context.trace_id
    a, b = traced.one("POST /a"), traced.one("POST /b")
    assert a.context is not None and b.context is not None
    assert by_user == {
        span_id(a): a.context.trace_id,
        span_id(b): b.context.trace_id,
    }
