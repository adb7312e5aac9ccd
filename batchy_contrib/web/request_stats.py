"""Per-request batching stats: the rounds and loader calls made while one web request ran.

The web integrations (``asgi``, ``fastapi``, ``flask``, ``django``) open one
:class:`RequestStats` per request with :func:`track` and hand it to the request
(``request.state.batchy``, ``g.batchy``, ``request.batchy``).

The counts are the request's scope's own (:class:`batchy.ScopeStats`, kept by
the engine), so they are exact whatever thread or event loop the request's
handlers run on, and however many requests run at once: a round or a call
counts for a request only if it had keys of that request. Batches are not per
request, though: keys that concurrent requests ask for in the same round share
one call, and that call counts in each of them. ``overlapped`` says how many
other requests were in flight on the same thread during this one.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import threading
import time
from collections.abc import Awaitable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import batchy

T = TypeVar("T")

__all__ = [
    "RequestStats",
    "NOT_A_HEADER",
    "Served",
    "counted_here",
    "current_stats",
    "is_header_name",
    "log",
    "run",
    "serving",
    "track",
]

#: What an option naming the stats' response header is told when it names none.
NOT_A_HEADER = (
    "is not an HTTP header name (ASCII letters, digits and !#$%&'*+-.^_`|~, no spaces or colons)"
)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def is_header_name(name: object) -> bool:
    """Whether ``name`` may name a response header: servers drop a response with another."""
    return isinstance(name, str) and _TOKEN.fullmatch(name) is not None


#: Where :func:`track` logs one line per request when asked to (``log=True``).
log = logging.getLogger("batchy.requests")


class RequestStats:
    """What batchy did for one request: rounds, calls and keys per loader, errors.

    ``scope`` is the request's :class:`batchy.Scope` (loader caches live there);
    ``stats`` its :class:`batchy.ScopeStats`, which the counts here read.
    """

    def __init__(self, name: str, scope: batchy.Scope) -> None:
        self.name = name
        self.scope = scope
        self.stats = scope.stats
        self.overlapped = 0
        self.started = time.perf_counter()
        self.duration: float | None = None
        self.thread = threading.get_ident()  # where the request's own loop runs

    def __repr__(self) -> str:
        return f"<batchy.RequestStats {self.name} rounds={self.rounds} calls={self.calls}>"

    @property
    def rounds(self) -> int:
        """Rounds that flushed keys of this request."""
        return self.stats.rounds

    @property
    def calls(self) -> dict[str, int]:
        """Loader name -> batch calls with keys of this request."""
        return self.stats.calls

    @property
    def keys(self) -> dict[str, int]:
        """Loader name -> this request's keys those calls answered."""
        return self.stats.keys

    @property
    def errors(self) -> int:
        """Batch calls with keys of this request that failed as a whole."""
        return sum(self.stats.errors.values())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary, as put in a GraphQL response's ``extensions``."""
        out: dict[str, Any] = {"rounds": self.rounds, "calls": dict(self.calls)}
        if self.errors:
            out["errors"] = self.errors
        if self.overlapped:
            out["overlapped"] = self.overlapped
        return out

    def summary(self) -> str:
        """One log line: ``GET /feed: 3 rounds, 5 calls (users_by_id 3, ...) in 4.1 ms``."""
        per = ", ".join(f"{name} {n}" for name, n in self.calls.items())
        total = sum(self.calls.values())
        took = f" in {self.duration * 1000:.1f} ms" if self.duration is not None else ""
        shared = f", overlapped {self.overlapped} other request(s)" if self.overlapped else ""
        return _one_line(
            f"{self.name}: {self.rounds} rounds, {total} calls"
            f"{f' ({per})' if per else ''}{shared}{took}"
        )


def _one_line(text: str) -> str:
    """``text`` with what is not printable (line breaks, NUL) escaped as Python would.

    The summary names the request by its path, which the server has
    percent-decoded: ``%0D%0A`` in a URL must not start a new header in the
    response (servers refuse to send it) or a forged line in the log.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Collector:
    """Which requests are open on each thread, for :attr:`RequestStats.overlapped`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[int, list[RequestStats]] = {}

    def enter(self, stats: RequestStats) -> int:
        ident = threading.get_ident()
        with self.lock:
            others = self.open.get(ident, [])
            for other in others:
                other.overlapped += 1
            stats.overlapped += len(others)
            self.open[ident] = [*others, stats]
        return ident

    def exit(self, stats: RequestStats, ident: int) -> None:
        with self.lock:
            left = [s for s in self.open.get(ident, []) if s is not stats]
            if left:
                self.open[ident] = left
            else:
                self.open.pop(ident, None)


_collector = _Collector()
_current: contextvars.ContextVar[RequestStats | None] = contextvars.ContextVar(
    "batchy_request_stats", default=None
)


def current_stats() -> RequestStats | None:
    """The stats of the request being served in this context, if an integration opened one."""
    return _current.get()


@contextlib.contextmanager
def serving(stats: RequestStats) -> Iterator[RequestStats]:
    """Back in ``stats``' request after :func:`track` ended: a streamed response's body
    (which the server reads after the view returned) loads with the request's scope."""
    token = _current.set(stats)
    try:
        with stats.scope:
            yield stats
    finally:
        _current.reset(token)


class Served(Generic[T]):
    """A streamed response body whose chunks are each read in ``stats``' request (see
    :func:`serving`): the server reads it after the view returned and the request's
    :func:`track` ended, so its loads find the view's cache and count in its stats."""

    def __init__(self, content: Iterable[T], stats: RequestStats) -> None:
        self._chunks = iter(content)
        # The server closes what it was given, early when the client went away:
        # the body's own close (a generator's finally blocks) runs in the request too.
        self._close = getattr(content, "close", None)
        self._stats = stats

    def __iter__(self) -> Served[T]:
        return self

    def __next__(self) -> T:
        with serving(self._stats):
            return next(self._chunks)

    def close(self) -> None:
        """Close the body, in the request's scope."""
        if self._close is not None:
            with serving(self._stats):
                self._close()


@contextlib.contextmanager
def track(name: str, *, log_stats: bool = False) -> Iterator[RequestStats]:
    """Give the block a new :class:`batchy.Scope` and count what batchy does in it.

    ::

        with track("GET /feed") as stats:
            page = batchy.run(feed_view(), scope=stats.scope)
        print(stats.rounds, stats.calls)
    """
    stats = RequestStats(name, batchy.Scope(name))
    ident = _collector.enter(stats)
    try:
        with serving(stats):
            yield stats
    finally:
        _collector.exit(stats, ident)
        stats.duration = time.perf_counter() - stats.started
        if log_stats:
            log.info("%s", stats.summary())


def run(aw: Awaitable[T]) -> T:
    """:func:`batchy.run` for sync code serving a request: the request's scope and stats.

    From a sync view (Flask, Django, a sync Starlette endpoint run in a worker
    thread) this runs ``aw`` on an event loop of its own, with the loader caches
    of the request and its rounds counted in the request's stats; outside a
    request it is plain :func:`batchy.run`. In async code, ``await`` instead.
    """
    stats = _current.get()
    if stats is None:
        return batchy.run(aw)
    return batchy.run(aw, scope=stats.scope)


@contextlib.contextmanager
def counted_here(stats: RequestStats) -> Iterator[RequestStats]:
    """Kept for code written for thread-attributed stats: the request's scope counts anywhere."""
    yield stats
