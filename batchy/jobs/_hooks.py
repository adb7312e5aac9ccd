"""Metrics hooks of the job system, and the one log line per job the worker writes.

A hook is any object with some of :class:`JobHook`'s methods. Register it on a
queue (``Queue(hooks=[...])``, ``queue.hooks.append(...)``) or on one worker. A
hook that raises is logged and ignored: a broken exporter must not fail jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["JobEvent", "JobHook", "emit", "log"]

log = logging.getLogger("batchy.jobs")


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A job started or finished on a worker.

    ``outcome`` is ``started``, ``done``, ``retry``, ``dead`` or ``released``;
    ``duration`` is in seconds (0 when started); ``attempt`` counts from 1.
    """

    id: str
    job: str
    queue: str
    attempt: int
    outcome: str
    duration: float = 0.0
    error: BaseException | None = None


class JobHook:
    """Base class for job hooks; override what you need."""

    def job_started(self, event: JobEvent) -> None:
        """Called when a worker starts a job."""

    def job_finished(self, event: JobEvent) -> None:
        """Called when a job finished: done, retry, dead or released at shutdown."""


def emit(hooks: Iterable[JobHook], method: str, event: JobEvent) -> None:
    """Call ``method`` on every hook, logging (not raising) what a hook raises."""
    for hook in hooks:
        try:
            getattr(hook, method)(event)
        except Exception:
            log.exception("batchy.jobs hook %r failed in %s", hook, method)
