"""Handlers as workers run them: begun only under a live lease, their ``SystemExit`` a failure.

The batchy engine lets those two leave the event loop, as asyncio does ("the
process decides"). In a worker that would kill the process, leave its other jobs
leased, and let the poison job kill the next worker, forever. So the runner
calls handlers through :func:`guard`, which carries them to it as an ordinary
exception (:class:`Escaped`); the runner unwraps it and counts a failed attempt.
A real shutdown never comes this way: the worker's signal handlers stop it.

Why the lease is checked in the handler's first line: a worker paused (SIGSTOP,
a blocked loop) between claiming a job and beginning its handler must not begin
it once the store has given the job to another worker, or the two runs overlap
(and, on an ordering key, the late run overlaps the key's next job). The runner
checks too, but the engine begins a handler a loop step or more after that;
here nothing runs between the check and the handler's own code.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any, ParamSpec, Protocol

import batchy

from ._errors import LeaseLost

__all__ = ["Escaped", "JobScope", "Runs", "guard"]

P = ParamSpec("P")


class Escaped(Exception):
    """A ``SystemExit`` or ``KeyboardInterrupt`` raised by a handler, on its way to the runner."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class Runs(Protocol):
    """What a worker says of the runs it holds, each named by its claim ``(job id, token)``."""

    def fresh(self, claim: tuple[str, str]) -> bool:
        """False once the lease ran out (the job may be another worker's now)."""

    def cancel_requested(self, claim: tuple[str, str]) -> bool:
        """True once an operator cancelled the run."""

    def stop_requested(self, claim: tuple[str, str]) -> bool:
        """True once the worker stopped the run (it stops, or lost the lease)."""


class JobScope(batchy.Scope):
    """The scope of one run of a job: its claim, and what the worker says of that run.

    The run's questions go to ``runs`` with the claim, rather than through
    callables made for each run: a worker makes one scope per job it takes.
    """

    __slots__ = ("claim", "runs")

    def __init__(self, name: str, claim: tuple[str, str], runs: Runs) -> None:
        super().__init__(name)
        self.claim = claim
        self.runs = runs

    def fresh(self) -> bool:
        return self.runs.fresh(self.claim)

    def cancel_requested(self) -> bool:
        return self.runs.cancel_requested(self.claim)

    def stop_requested(self) -> bool:
        return self.runs.stop_requested(self.claim)


def _begin() -> None:
    scope = batchy.current_scope()
    if type(scope) is JobScope and not scope.fresh():
        raise LeaseLost("the lease ran out before the handler began")


def guard(fn: Callable[P, Any]) -> Callable[P, Any]:
    """``fn`` (an ``async def`` or a generator function) begun only while its run's lease
    holds, and with those two turned into Escaped."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_coroutine(*args: P.args, **kwargs: P.kwargs) -> Any:
            _begin()
            try:
                return await fn(*args, **kwargs)
            except (SystemExit, KeyboardInterrupt) as error:
                raise Escaped(error) from None

        return guarded_coroutine
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def guarded_generator(*args: P.args, **kwargs: P.kwargs) -> Generator[Any, Any, Any]:
            _begin()
            try:
                return (yield from fn(*args, **kwargs))
            except (SystemExit, KeyboardInterrupt) as error:
                raise Escaped(error) from None

        return guarded_generator
    return fn  # not a handler: batchy.task refuses it with its own message
