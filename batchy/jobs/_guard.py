"""Handlers as workers run them: a ``SystemExit`` or ``KeyboardInterrupt`` they raise is a failure.

The batchy engine lets those two leave the event loop, as asyncio does ("the
process decides"). In a worker that would kill the process, leave its other jobs
leased, and let the poison job kill the next worker, forever. So the runner
calls handlers through :func:`guard`, which carries them to it as an ordinary
exception (:class:`Escaped`); the runner unwraps it and counts a failed attempt.
A real shutdown never comes this way: the worker's signal handlers stop it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any, ParamSpec

__all__ = ["Escaped", "guard"]

P = ParamSpec("P")


class Escaped(Exception):
    """A ``SystemExit`` or ``KeyboardInterrupt`` raised by a handler, on its way to the runner."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def guard(fn: Callable[P, Any]) -> Callable[P, Any]:
    """``fn`` (an ``async def`` or a generator function) with those two turned into Escaped."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_coroutine(*args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                return await fn(*args, **kwargs)
            except (SystemExit, KeyboardInterrupt) as error:
                raise Escaped(error) from None

        return guarded_coroutine
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def guarded_generator(*args: P.args, **kwargs: P.kwargs) -> Generator[Any, Any, Any]:
            try:
                return (yield from fn(*args, **kwargs))
            except (SystemExit, KeyboardInterrupt) as error:
                raise Escaped(error) from None

        return guarded_generator
    return fn  # not a handler: batchy.task refuses it with its own message
