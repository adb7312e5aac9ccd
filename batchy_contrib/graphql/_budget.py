"""The limits a running execution checks: completed objects and the time budget, ended by LimitStop.

The validation rules of :class:`Limits` refuse a query before it runs; what
only the execution can measure (how many objects the data really holds, how
long the resolvers really take) is checked here, as the planned executor goes.
Going over ends the whole execution: the data is null and the errors end with
one that names the limit and the measured value. A partial response cut at an
arbitrary point would look like data the client asked for; null data with an
error says plainly that the request was too big.
"""

from __future__ import annotations

import time

from graphql import GraphQLError

from .limits import Limits

__all__ = ["Budget", "LimitStop"]

# With a time budget, the clock is read every this many completed objects (and
# whenever the executor wakes up): often enough to stop within milliseconds,
# rarely enough to cost nothing measurable.
_CLOCK_EVERY = 256

_NEVER = 1 << 62


class LimitStop(BaseException):
    """Ends an execution that went over a limit; carries the error to report.

    A ``BaseException``: it must pass through the ``except Exception`` of every
    field it unwinds (each would otherwise report it as that field's error).
    The executor catches it where the execution starts and where it waits.
    """

    def __init__(self, error: GraphQLError) -> None:
        super().__init__(error.message)
        self.error = error


class Budget:
    """What one execution may still use, from ``Limits.max_objects`` and ``time_budget``."""

    __slots__ = ("deadline", "max_objects", "started", "time_budget")

    def __init__(self, limits: Limits) -> None:
        self.max_objects = limits.max_objects
        self.time_budget = limits.time_budget
        self.started = time.monotonic()
        self.deadline = None if self.time_budget is None else self.started + self.time_budget

    @staticmethod
    def of(limits: Limits | None) -> Budget | None:
        """The budget for ``limits``, or None when neither run-time limit is set."""
        if limits is None or (limits.max_objects is None and limits.time_budget is None):
            return None
        return Budget(limits)

    def check(self, objects: int) -> int:
        """Raise :class:`LimitStop` if over; else the object count at which to check again."""
        max_objects = self.max_objects
        if max_objects is not None and objects > max_objects:
            raise LimitStop(
                _error("max_objects", max_objects, objects, f"{objects:,} objects completed")
            )
        if self.deadline is None:
            return _NEVER if max_objects is None else max_objects + 1
        self.check_time()
        following = objects + _CLOCK_EVERY
        return following if max_objects is None else min(following, max_objects + 1)

    def check_time(self) -> None:
        """Raise :class:`LimitStop` if the time budget is spent."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            elapsed = time.monotonic() - self.started
            raise LimitStop(
                _error("time_budget", self.time_budget, round(elapsed, 3), f"{elapsed:.3f} s")
            )

    def remaining(self) -> float | None:
        """Seconds until the deadline, or None without a time budget."""
        return None if self.deadline is None else self.deadline - time.monotonic()


def _error(limit: str, allowed: object, value: object, measured: str) -> GraphQLError:
    return GraphQLError(
        f"The request went over the limit {limit}={allowed}: it measured {measured} when "
        "it was stopped, and returns no data. Ask for less in one query (fewer or smaller "
        "lists), or raise the limit on the server.",
        extensions={"code": "QUERY_LIMIT", "limit": limit, "value": value},
    )
