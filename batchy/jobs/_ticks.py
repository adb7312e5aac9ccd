"""Periodic ticks on one worker: when each periodic job is next due, and the envelopes of due ones.

Every worker keeps this schedule; the store accepts each tick once across all of
them, because a tick's envelope carries a unique key (job name + tick time). A
tick whose push fails is pushed again until the store takes it (the unique key
keeps a push that did land from landing twice), so an outage at a tick makes it
late, never lost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._cron import Schedule
from ._errors import JobError
from ._hooks import log
from ._job import JobType
from ._model import Envelope, Message, encode
from ._serializer import Serializer
from ._times import MAX_SPAN

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["PeriodicLike", "Ticks"]

#: Seconds between tries of a tick whose push failed.
RETRY = 1.0
#: Seconds between looks at a schedule whose next_after() raised.
BROKEN_RETRY = 60.0


class PeriodicLike(Protocol):
    """What ticking needs of a :class:`~batchy.jobs.Periodic`."""

    @property
    def job(self) -> JobType[[], Any]: ...
    @property
    def schedule(self) -> Schedule: ...


class Ticks:
    """The next tick of each of ``periodics`` on this worker, from its first look on."""

    def __init__(self, periodics: Sequence[PeriodicLike], serializer: Serializer) -> None:
        self.periodics = periodics
        self.serializer = serializer
        self._next: dict[str, float] = {}
        self._after: dict[str, float] = {}  # the next ticks once the due ones are pushed
        self._retry_at = 0.0
        self._broken: dict[str, float] = {}  # schedules that raised: when to ask again

    def next_at(self) -> float | None:
        """The Unix time of the earliest next tick, None before the first look (or none)."""
        earliest = min(self._next.values(), default=None)
        return None if earliest is None else max(earliest, self._retry_at)

    def due(self, now: float) -> list[tuple[Message, Envelope]]:
        """The jobs of the ticks due at ``now``; the first look only sets the schedule.

        A worker that starts does not replay the past, and one that stalled over
        several ticks enqueues only the latest.
        """
        envelopes: list[tuple[Message, Envelope]] = []
        if now < self._retry_at:
            return envelopes
        for periodic in self.periodics:
            name = periodic.job.name
            if self._broken.get(name, 0.0) > now:
                continue
            try:
                found = self._tick(periodic, now)
            except Exception as error:  # a schedule of the user's own: fails only its job
                self._failed(name, periodic.schedule, error, now)
                continue
            self._broken.pop(name, None)
            if found is not None:
                envelopes.append(found)
        return envelopes

    def _tick(self, periodic: PeriodicLike, now: float) -> tuple[Message, Envelope] | None:
        name = periodic.job.name
        due = self._next.get(name)
        if due is None:
            self._next[name] = periodic.schedule.next_after(now)
            return None
        if now < due:
            return None
        tick = due
        for _ in range(100_000):  # a stalled worker enqueues only the latest tick
            following = periodic.schedule.next_after(tick)
            if following > now or following <= tick:
                break
            tick = following
        self._after[name] = periodic.schedule.next_after(tick)
        call = periodic.job.call()
        message = call.message(now)
        interval = self._after[name] - tick
        envelope = Envelope(
            message.id,
            message.queue,
            encode(message, self.serializer),
            key=periodic.job.order_key(call),  # ordered_by= keeps its runs one at a time
            unique=f"periodic:{name}:{tick:.6f}",
            # Long past any push of this tick; capped, since the stores keep
            # nothing past ten years (a yearly 29 February is four apart).
            unique_ttl=min(float(MAX_SPAN), max(3600.0, 3 * interval)),
        )
        return message, envelope

    def _failed(self, name: str, schedule: Schedule, error: Exception, now: float) -> None:
        # Logged once a streak: the schedule is asked again each BROKEN_RETRY seconds,
        # from a first look (no tick of the time it was broken is made up for).
        if name not in self._broken:
            log.error(
                "periodic job %r: its schedule %r failed (%s: %s), so it does not tick; "
                "asked again every %gs until it answers. Fix its next_after()",
                name, schedule, type(error).__name__, error, BROKEN_RETRY,
            )  # fmt: skip
        self._broken[name] = now + BROKEN_RETRY
        self._next.pop(name, None)
        self._after.pop(name, None)

    async def push_due(
        self,
        backend: Backend,
        now: float,
        announce: Callable[[Message], None],
        failed: Callable[[BaseException], object],
        bounded: Callable[[Awaitable[list[bool]]], Awaitable[list[bool]]],
    ) -> None:
        """Push the ticks due at ``now``: ``announce`` each one kept, ``failed`` a failed push
        (``bounded`` gives up on a store that stopped answering)."""
        due = self.due(now)
        if due:
            try:
                pushed = await bounded(backend.push([e for _, e in due], now))
            except Exception as error:
                if not _refused(error):
                    self._after.clear()  # the same ticks again, after a pause
                    self._retry_at = now + RETRY
                    failed(error)
                    return
                log.error("periodic jobs %s: ticks not enqueued: %s", _names(due), error)
            else:
                # Every worker pushes each tick and the store keeps one: only the worker
                # whose push was kept tells the hooks (one enqueue counted, one span).
                for (message, _), kept in zip(due, pushed, strict=True):
                    if kept:
                        announce(message)
            self._next.update(self._after)
            self._after.clear()


def _refused(error: Exception) -> bool:
    """Whether the store refused the ticks (trying again cannot help), rather than failed.

    A refusal is a :class:`JobError`; but one that is also a ``TimeoutError``
    (``NoAnswer``: the store did not answer in time) is an outage like any other.
    """
    return isinstance(error, JobError) and not isinstance(error, TimeoutError)


def _names(due: Sequence[tuple[Message, Envelope]]) -> str:
    return ", ".join(repr(message.job) for message, _ in due)
