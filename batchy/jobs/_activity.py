"""Per-minute activity counters: what each worker tallies and writes to the store, read back.

A worker counts, per minute of its clock (:class:`Tally`): the attempts it
finished and how many failed, per queue; the attempts and the batchy rounds
they took, per job type (from each job's :class:`batchy.ScopeStats`); and the
batch calls and keys of every loader call that served one of its jobs (from the
engine's :class:`batchy.BatchEvent`, so a call shared by 100 jobs counts once,
as the data source saw it). Every heartbeat it adds what it counted to the
store's counters in one :meth:`Backend.add_counts` call, and once more when it
stops; so any process, a dashboard's, reads the last hour of all workers with
:meth:`Activity.read`. Counting costs a few dict increments per job and per
batch call; a worker that ran nothing writes nothing.

A counter is named ``kind:label``: ``processed:<queue>``, ``failed:<queue>``,
``jobs:<job type>``, ``rounds:<job type>``, ``calls:<loader>``, ``keys:<loader>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import batchy

from . import _clock
from ._backend import COUNTS_KEPT
from ._hooks import ENDS_ATTEMPT, JobEvent, JobHook, log

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["KINDS", "Activity", "Tally", "minute_of"]

#: The kinds of counter a worker keeps (see the module's docstring).
KINDS = ("processed", "failed", "jobs", "rounds", "calls", "keys")

Counts = dict[tuple[int, str], int]


def minute_of(when: float) -> int:
    """The Unix minute (minutes since the epoch) that Unix time ``when`` falls in."""
    return int(when // 60)


class Tally(JobHook, batchy.Hook):
    """A worker's counters since its last write: a job hook and an engine hook.

    The worker registers it on the engine (:func:`batchy.add_hook`) while it
    runs. Only batch calls with keys of this worker's running jobs count, so a
    web request served by the same process is not counted as job work.
    """

    def __init__(self) -> None:
        self._counts: Counts = {}  # minutes before this one, and what a failed write kept
        # This minute's counters by name alone: no (minute, name) key made per job;
        # and the runs' by queue and job type, [processed, failed, jobs, rounds],
        # named as the minute is filed (_fold): one look-up per job.
        self._minute = -1
        self._now: dict[str, int] = {}
        self._runs: dict[tuple[str, str], list[int]] = {}
        # The stats of this worker's running jobs (JobEvent.stats), by identity:
        # a batch call counts when one of the scopes it served is one of theirs.
        self._running: set[batchy.ScopeStats] = set()
        self._failing = False  # the last write failed (logged once until one succeeds)

    def __repr__(self) -> str:
        counters = len(self._counts.keys() | {(self._minute, name) for name in self._named()})
        return f"<batchy.jobs Tally counters={counters} running={len(self._running)}>"

    def _add(self, minute: int, name: str, amount: int) -> None:
        key = (minute, name)
        self._counts[key] = self._counts.get(key, 0) + amount

    def _this_minute(self) -> dict[str, int]:
        minute = minute_of(_clock.now())
        if minute != self._minute:
            self._fold()
            self._minute = minute
        return self._now

    def _named(self) -> dict[str, int]:
        """This minute's counters by name, the runs' named now."""
        named = dict(self._now)
        for (queue, job), (processed, failed, jobs, rounds) in self._runs.items():
            counts = [(f"processed:{queue}", processed)]
            if failed:
                counts.append((f"failed:{queue}", failed))
            if jobs:  # (runs with their scope's stats: a worker's always have them)
                counts += [(f"jobs:{job}", jobs), (f"rounds:{job}", rounds)]
            for name, amount in counts:
                named[name] = named.get(name, 0) + amount
        return named

    def _fold(self) -> None:
        for name, amount in self._named().items():
            self._add(self._minute, name, amount)
        self._now, self._runs = {}, {}

    def job_started(self, event: JobEvent) -> None:
        if event.stats is not None:
            self.started(event.stats)

    def job_finished(self, event: JobEvent) -> None:
        self.finished(event.queue, event.job, event.outcome, event.stats)

    # What the two hook methods count, for the runner to call directly when this
    # tally is a worker's only hook: no event is built for it then (see _runner).

    def started(self, stats: batchy.ScopeStats) -> None:
        """A run began, ``stats`` its scope's: its batch calls count from now."""
        self._running.add(stats)

    def finished(self, queue: str, job: str, outcome: str, stats: batchy.ScopeStats | None) -> None:
        """A run of ``job`` on ``queue`` ended with ``outcome`` (a :class:`JobEvent`'s)."""
        if stats is not None:
            self._running.discard(stats)
        if outcome not in ENDS_ATTEMPT:
            return
        self._this_minute()
        counts = self._runs.get((queue, job))
        if counts is None:
            counts = self._runs[queue, job] = [0, 0, 0, 0]
        counts[0] += 1
        if outcome in ("retry", "dead"):  # an operator's cancel is not a failure
            counts[1] += 1
        if stats is not None:
            counts[2] += 1
            counts[3] += stats.rounds

    def batch_flushed(self, event: batchy.BatchEvent) -> None:
        running = self._running
        if running and any(s.stats in running for s in event.scopes):
            now = self._this_minute()
            calls, keys = f"calls:{event.loader}", f"keys:{event.loader}"
            now[calls] = now.get(calls, 0) + 1
            now[keys] = now.get(keys, 0) + len(event.keys)

    def take(self) -> Counts:
        """The counters since the last take, which start again from zero."""
        self._fold()
        counts, self._counts = self._counts, {}
        return counts

    async def flush(self, backend: Backend) -> None:
        """Add what was counted to ``backend``'s counters; logged, never raised, when it fails.

        What a failed write held is kept for the next one: counted late rather
        than lost (a write that failed after the store applied it counts twice,
        which a chart survives; a job must never fail for a chart).
        """
        counts = self.take()
        if not counts:
            return
        try:
            await backend.add_counts(counts, _clock.now())
        except BaseException as error:
            for (minute, name), amount in counts.items():
                self._add(minute, name, amount)
            if not isinstance(error, Exception):
                raise  # cancelled (a store that did not answer in time): kept all the same
            if not self._failing:
                log.warning("activity counters not written to %r (kept for later): %s",
                            backend, error)  # fmt: skip
            self._failing = True
        else:
            self._failing = False


@dataclass(frozen=True, slots=True)
class Activity:
    """The counters of ``minutes`` minutes up to the current one, all workers together.

    ``first`` is the Unix minute of the first; ``counts`` maps ``(minute, name)``
    to a count. ::

        activity = await Activity.read(queue.backend)
        activity.series("processed", "default")   # 60 per-minute counts, oldest first
        activity.labels("calls")                  # the loaders that were called
    """

    first: int
    minutes: int
    counts: Mapping[tuple[int, str], int] = field(default_factory=dict)

    @classmethod
    async def read(cls, backend: Backend, minutes: int = 60, now: float | None = None) -> Activity:
        """The last ``minutes`` minutes (at most :data:`COUNTS_KEPT`) of ``backend``'s counters."""
        now = _clock.now() if now is None else now
        minutes = max(1, min(minutes, COUNTS_KEPT))
        first = minute_of(now) - minutes + 1
        counts = await backend.read_counts(first, now)
        return cls(first, minutes, {k: v for k, v in counts.items() if k[0] >= first})

    def labels(self, kind: str) -> list[str]:
        """The labels (queues, job types, loaders) with a ``kind`` counter, sorted."""
        prefix = kind + ":"
        return sorted({n[len(prefix) :] for _, n in self.counts if n.startswith(prefix)})

    def series(self, kind: str, label: str) -> list[int]:
        """The ``kind:label`` counter of each minute, oldest first (0 where nothing counted)."""
        name = f"{kind}:{label}"
        return [self.counts.get((self.first + i, name), 0) for i in range(self.minutes)]

    def sum_series(self, kind: str) -> list[int]:
        """The ``kind`` counters of all labels added up, per minute."""
        totals = [0] * self.minutes
        for label in self.labels(kind):
            for i, value in enumerate(self.series(kind, label)):
                totals[i] += value
        return totals

    def total(self, kind: str, label: str | None = None) -> int:
        """A ``kind`` counter over all the minutes (of all labels when ``label`` is None)."""
        if label is None:
            return sum(self.sum_series(kind))
        return sum(self.series(kind, label))

    def ratio(self, top: str, bottom: str, label: str) -> float:
        """``total(top, label) / total(bottom, label)``; NaN when nothing was counted."""
        below = self.total(bottom, label)
        return self.total(top, label) / below if below else math.nan

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy: ``first``, ``minutes`` and ``series`` (name -> per-minute counts)."""
        names = sorted({n for _, n in self.counts})
        series = {n: self.series(*n.split(":", 1)) for n in names}
        return {"first": self.first, "minutes": self.minutes, "series": series}
