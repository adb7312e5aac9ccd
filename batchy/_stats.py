"""Per-scope statistics: which scopes a batch's keys are for, and what each scope cost.

Every :class:`batchy.Scope` has one :class:`ScopeStats`, ``scope.stats``, kept
up to date by the engine as it goes, so a request or a job can read what it
cost from inside its own handlers (``batchy.current_scope().stats``) and after
it ran. The counters are always on and cheap: a batch learns which scopes asked
for its keys by comparing one reference per key (:class:`Askers`, a base of the
batch), and counts them per call, not per key. A cache hit appends its loader to a list
(cheaper than counting it in a dict, which allocates an int), and the list
is counted when someone reads ``hits``, or when it grows long.

Batches are not per scope: keys that several scopes ask for in one round share
one call, and that call counts in *each* scope that had keys in it. So summing
``calls`` over concurrent requests can give more calls than the loader saw;
the hooks (:class:`batchy.BatchEvent`) count each call once.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import Any

__all__ = ["Askers", "ScopeStats"]


class ScopeStats:
    """What batchy did for one scope; read it as ``scope.stats``.

    - ``rounds``: rounds that flushed at least one key of this scope;
    - ``calls``: loader name -> batch calls that had keys of this scope (a call
      shared with other scopes counts in each of them);
    - ``keys``: loader name -> this scope's loads those calls answered (a key
      several scopes asked for in one round is sent once and counts in each);
    - ``hits``: loader name -> loads answered by the scope's cache, without a
      key joining a batch (a key asked again, in this round or a later one);
    - ``errors``: loader name -> calls among ``calls`` that failed as a whole;
    - ``waited``: seconds during which at least one call with keys of this
      scope was running: the time its handlers spent waiting on batches.

    ::

        @batchy.task
        def page(pid):
            post = yield posts_by_id(pid)
            stats = batchy.current_scope().stats
            print(stats.rounds, stats.calls)   # 1 {'posts_by_id': 1}
    """

    __slots__ = (
        "_hit_log",
        "_hits",
        "_inflight",
        "_round",
        "_sched",
        "_since",
        "calls",
        "errors",
        "keys",
        "rounds",
        "waited",
    )

    def __init__(self) -> None:
        self.rounds = 0
        self.calls: dict[str, int] = {}
        self.keys: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.waited = 0.0
        # Cache hits: the loader of each since the last count, then counts per
        # loader object; named when read.
        self._hit_log: list[Any] = []
        self._hits: dict[Any, int] = {}
        self._inflight = 0  # calls with our keys running now
        self._since = 0.0  # when the first of them started
        # The last round counted, as (scheduler, number): each event loop numbers
        # its own rounds, and a scope may see several loops (a sync view's runs).
        # The scheduler is held, not its id, so a new one cannot take its address.
        self._sched: object = None
        self._round = 0

    @property
    def hits(self) -> dict[str, int]:
        """Loader name -> loads answered by this scope's cache."""
        self._count_hits()
        named: dict[str, int] = {}
        for loader, count in list(self._hits.items()):
            name = loader.name
            named[name] = named.get(name, 0) + count
        return named

    def __repr__(self) -> str:
        return (
            f"<batchy.ScopeStats rounds={self.rounds} calls={self.calls} "
            f"waited={self.waited * 1000:.1f}ms>"
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy: ``rounds``, ``calls``, ``keys``, ``hits``, ``errors``, ``waited``."""
        return {
            "rounds": self.rounds,
            "calls": dict(self.calls),
            "keys": dict(self.keys),
            "hits": self.hits,
            "errors": dict(self.errors),
            "waited": self.waited,
        }

    # -- kept up to date by the batch (engine internal) ------------------------------

    def _count_hits(self) -> None:
        log = self._hit_log
        done = len(log)  # hits logged meanwhile (another thread) stay for the next count
        hits = self._hits
        for loader, count in Counter(islice(log, done)).items():
            hits[loader] = hits.get(loader, 0) + count
        del log[:done]

    def _in_round(self, sched: object, number: int) -> None:
        """A round flushes keys of this scope; count it once, however many batches it has."""
        if self._round != number or self._sched is not sched:
            self._sched = sched
            self._round = number
            self.rounds += 1
            if len(self._hit_log) > 4096:  # a long request: keep its log short
                self._count_hits()

    def _call_started(self, now: float) -> None:
        if not self._inflight:
            self._since = now
        self._inflight += 1

    def _call_finished(self, loader: str, keys: int, now: float) -> None:
        self._inflight -= 1
        if not self._inflight:
            self.waited += now - self._since
        self.calls[loader] = self.calls.get(loader, 0) + 1
        self.keys[loader] = self.keys.get(loader, 0) + keys

    def _call_failed(self, loader: str) -> None:
        self.errors[loader] = self.errors.get(loader, 0) + 1


class _Nobody:
    def __repr__(self) -> str:
        return "<no scope yet>"


_NOBODY: Any = _Nobody()  # the asker before the first key: not even "no scope" (None)


class Askers:
    """Which scopes asked for the keys of one batch: the base of ``Batch``.

    Who asked is kept without a record per key: ``_runs`` is [scope, start,
    scope, start, ...], each scope asking for ``keys[start:]`` up to the next
    start. Handlers of one scope run in bursts, so the loader's hot path pays
    one reference comparison per key (``batch._last_scope is not scope``) and
    a run per burst. Scopes are typed ``Any`` here: this module sits below the
    scopes (a scope holds its stats).
    """

    __slots__ = ("_last_scope", "_runs", "_shared")

    keys: list[Any]  # the batch's distinct keys, in order
    futures: dict[Any, Any]  # cache key -> future, in the same order

    def __init__(self) -> None:
        self._runs: list[Any] = []
        self._last_scope: Any = _NOBODY
        # (scope, cache key) of each key asked for again once in the batch (by
        # another scope, or by the same one with the cache off).
        self._shared: list[tuple[Any, Any]] | None = None

    def joined(self, scope: Any) -> None:
        """The keys appended from now on are asked for by ``scope`` (``None``: no scope)."""
        self._last_scope = scope
        self._runs += (scope, len(self.keys))

    def shared(self, scope: Any, ck: Any) -> None:
        """``scope`` asks for cache key ``ck``, already in this batch."""
        if self._shared is None:
            self._shared = []
        self._shared.append((scope, ck))

    def scopes(self) -> list[Any]:
        """The scopes that asked for keys of this batch, in the order they first did."""
        found = dict.fromkeys(self._runs[::2])
        if self._shared:
            found.update(dict.fromkeys(scope for scope, _ in self._shared))
        found.pop(None, None)
        return list(found)

    def askers(self, first: int, end: int) -> dict[Any, int]:
        """The scopes with keys in ``keys[first:end]`` (one call), and how many keys each."""
        runs = self._runs
        if len(runs) == 2 and self._shared is None:  # the usual case: one scope asked
            scope = runs[0]
            return {} if scope is None else {scope: end - first}
        count: dict[Any, int] = {}
        total = len(self.keys)
        for i in range(0, len(runs), 2):
            low = max(runs[i + 1], first)
            high = min(runs[i + 3] if i + 3 < len(runs) else total, end)
            if high > low:
                count[runs[i]] = count.get(runs[i], 0) + high - low
        if self._shared:
            position = None
            if first or end < total:  # one call of several: find where each key went
                position = {ck: i for i, ck in enumerate(self.futures)}
            for scope, ck in self._shared:
                if position is None or first <= position[ck] < end:
                    count[scope] = count.get(scope, 0) + 1
        count.pop(None, None)
        return count
