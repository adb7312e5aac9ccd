"""Instrumentation: the only place where tracing, metrics and debug output plug into the engine.

The scheduler calls :func:`emit_round`, :func:`emit_batch` and :func:`emit_task_failed`
(scopes call :func:`emit_scope_entered` and :func:`emit_scope_exited`) and knows
nothing about who listens; no event is built unless a hook is registered. A hook
is any object with some of the methods of :class:`Hook`; a hook that raises is
logged and otherwise ignored, because a broken metrics exporter must never leave
a handler waiting. (The per-scope counters a request reads about itself are not
hooks but always-on counters: see ``_stats``.)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["BatchEvent", "Hook", "RoundEvent", "add_hook", "hooked", "remove_hook"]

log = logging.getLogger("batchy")


@dataclass(frozen=True, slots=True)
class RoundEvent:
    """A round started: every batch pending when no handler could go on is flushed.

    ``scopes`` are the :class:`batchy.Scope` objects with keys in the round's batches.
    """

    number: int
    loaders: tuple[str, ...]
    keys: int
    scopes: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchEvent:
    """One call of a batch function finished (a chunk, when ``max_batch_size`` split it).

    ``chunk`` numbers the calls of one batch from 0; ``scopes`` are the
    :class:`batchy.Scope` objects whose loads the call answered (keys that several
    scopes asked for in one round are sent once, for all of them).
    """

    loader: str
    keys: tuple[Any, ...]
    round: int
    duration: float
    error: BaseException | None
    chunk: int = 0
    scopes: tuple[Any, ...] = ()


class Hook:
    """Base class for hooks; override the events you care about.

    >>> class Printer(Hook):
    ...     def batch_flushed(self, event: BatchEvent) -> None:
    ...         print(event.loader, len(event.keys))
    """

    def round_started(self, event: RoundEvent) -> None:
        """Called when the scheduler flushes a round of batches."""

    def batch_flushed(self, event: BatchEvent) -> None:
        """Called when one call of a batch function has finished."""

    def task_failed(self, task: Any, error: BaseException) -> None:
        """Called when a handler raised; ``task`` is the :class:`batchy.Task`."""

    def scope_entered(self, scope: Any) -> None:
        """Called when a :class:`batchy.Scope` becomes current in its outermost ``with`` block.

        Called in the context of the code that enters it (a request's, a job's),
        so a tracer can note the span the scope works for. A scope entered again
        while it is in a ``with`` block (in another task or thread) is not
        announced again.
        """

    def scope_exited(self, scope: Any) -> None:
        """Called when the last ``with`` block a scope is in exits, ``scope.stats`` complete."""


# A tuple, replaced on change: the scheduler reads it without locking and a
# hook added or removed mid-round never disturbs an iteration in progress.
hooks: tuple[Hook, ...] = ()
# Those of them that hear scope events. Every job and request enters and leaves
# a scope, and a hook that leaves both methods as Hook's own no-ops (one that
# counts batch calls, say) would be called twice per scope for nothing.
scoped: tuple[Hook, ...] = ()
_SCOPE_EVENTS = ("scope_entered", "scope_exited")


def _hears_scopes(hook: Hook) -> bool:
    """False for a hook without scope methods, or whose class leaves both as Hook's own."""
    if any(name in getattr(hook, "__dict__", ()) for name in _SCOPE_EVENTS):
        return True  # set on the object itself
    cls = type(hook)
    return any(
        getattr(cls, name, Hook) not in (Hook, getattr(Hook, name)) for name in _SCOPE_EVENTS
    )


def _registered(now: tuple[Hook, ...]) -> None:
    global hooks, scoped
    hooks, scoped = now, tuple(h for h in now if _hears_scopes(h))


def add_hook(hook: Hook) -> None:
    """Register ``hook`` for every scheduler in the process.

    Its methods are looked up as it is added: a :class:`Hook` whose class leaves
    ``scope_entered`` and ``scope_exited`` as Hook's own (they do nothing) is not
    called for scopes at all.
    """
    _registered((*hooks, hook))


def remove_hook(hook: Hook) -> None:
    """Unregister ``hook``; removing a hook that is not registered does nothing."""
    _registered(tuple(h for h in hooks if h is not hook))


@contextlib.contextmanager
def hooked(hook: Hook) -> Iterator[Hook]:
    """Register ``hook`` for the duration of a ``with`` block."""
    add_hook(hook)
    try:
        yield hook
    finally:
        remove_hook(hook)


def _tell(among: tuple[Hook, ...], method: str, *args: Any) -> None:
    for hook in among:
        try:
            # A hook needs only the methods it uses (see the module's note).
            if (call := getattr(hook, method, None)) is not None:
                call(*args)
        except Exception:
            log.exception("batchy hook %r failed in %s", hook, method)


def emit_round(event: RoundEvent) -> None:
    _tell(hooks, "round_started", event)


def emit_batch(event: BatchEvent) -> None:
    _tell(hooks, "batch_flushed", event)


def emit_task_failed(task: Any, error: BaseException) -> None:
    _tell(hooks, "task_failed", task, error)


def emit_scope_entered(scope: Any) -> None:
    _tell(scoped, "scope_entered", scope)


def emit_scope_exited(scope: Any) -> None:
    _tell(scoped, "scope_exited", scope)
