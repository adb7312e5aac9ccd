"""Metrics hooks of the job system, and the one log line per job the worker writes.

A hook is any object with some of :class:`JobHook`'s methods. Register it on a
queue (``Queue(hooks=[...])``, ``queue.hooks.append(...)``) or on one worker. A
hook that raises is logged and ignored: a broken exporter must not fail jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import batchy

from ._frozen import quick_init

__all__ = ["ENDS_ATTEMPT", "JobEvent", "JobHook", "emit", "log"]

log = logging.getLogger("batchy.jobs")


@quick_init
@dataclass(frozen=True, slots=True)
class JobEvent:
    """A job is being enqueued, or started or finished on a worker.

    ``outcome`` is ``enqueued`` (``attempt`` 0), ``started``, ``done``, ``retry``,
    ``dead``, ``cancelled`` (an operator's cancel: the job is in the dead set), ``lost``
    or ``released``; ``duration`` is in seconds (0 when
    enqueued or started); ``attempt`` counts from 1. ``headers`` is the job's
    metadata: a hook may write strings into it at enqueue (a trace context), and
    reads them back on the worker. ``stats`` is what batchy did for the run
    (its scope's :class:`batchy.ScopeStats`), on a worker's events.
    """

    id: str
    job: str
    queue: str
    attempt: int
    outcome: str
    duration: float = 0.0
    error: BaseException | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stats: batchy.ScopeStats | None = None

    @property
    def ends_attempt(self) -> bool:
        """True for the outcomes that end an attempt here (done, retry, dead, cancelled);
        a ``lost`` or ``released`` run ends elsewhere, in the attempt that follows it."""
        return self.outcome in ENDS_ATTEMPT


#: The outcomes that end an attempt on the worker (see JobEvent.ends_attempt).
ENDS_ATTEMPT = frozenset({"done", "retry", "dead", "cancelled"})


class JobHook:
    """Base class for job hooks; override what you need."""

    def job_enqueued(self, event: JobEvent) -> None:
        """Called for each job about to be stored; what it writes to ``event.headers`` is kept."""

    def job_started(self, event: JobEvent) -> None:
        """Called when a worker starts a job."""

    def job_finished(self, event: JobEvent) -> None:
        """Called when a job finished: done, retry, dead or released at shutdown."""


def emit(hooks: Iterable[JobHook], method: str, event: JobEvent) -> None:
    """Call ``method`` on every hook, logging (not raising) what a hook raises."""
    for hook in hooks:
        try:
            # A hook needs only the methods it uses (see the module's note).
            if (call := getattr(hook, method, None)) is not None:
                call(event)
        except Exception:
            log.exception("batchy.jobs hook %r failed in %s", hook, method)
