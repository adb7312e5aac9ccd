"""Scopes: where loader caches live (one run, one request, one job), so nothing leaks between them.

A task runs in the scope it was started in and passes it to the tasks it starts.
Code outside any task finds its scope in a context variable, set by
``with batchy.scope():`` / ``async with batchy.scope():``. Batches are not
per scope: keys from many scopes in one round share one batch call, and each
scope's cache keeps its own copy of the answer. Each scope also carries its
:class:`~batchy.ScopeStats`, and tells the hooks when its outermost ``with``
block is entered and left (where a tracer finds the span a scope works for).
"""

from __future__ import annotations

import contextvars
import threading
from types import TracebackType
from typing import Any

from . import _hooks
from ._errors import UsageError
from ._scheduler import current_scheduler
from ._stats import ScopeStats

__all__ = ["Scope", "current_scope", "scope"]

_current: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "batchy_scope", default=None
)
_tokens: contextvars.ContextVar[tuple[contextvars.Token[Scope | None], ...]] = (
    contextvars.ContextVar("batchy_scope_tokens", default=())
)
# Guards the entry counts: a request's scope may be entered by its worker thread
# (a sync view's batchy.run) while the request's own thread enters or leaves it.
_entries = threading.Lock()


class Scope:
    """One cache per loader, and the :class:`~batchy.ScopeStats` of one unit of work.

    Use it as a context manager (sync or async) to make it current::

        async with batchy.scope() as scope:
            user = await users_by_id(1)   # cached for the rest of the block
        print(scope.stats.calls)          # {'users_by_id': 1}
    """

    __slots__ = ("_caches", "_depth", "_hit_log", "name", "stats")

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._caches: dict[object, dict[Any, Any]] = {}
        #: What batchy did for this scope so far.
        self.stats = ScopeStats()
        self._hit_log = self.stats._hit_log  # for the loader's hot path: one attribute, not two
        self._depth = 0  # ``with`` blocks inside which this scope is, in any task or thread

    def __repr__(self) -> str:
        return f"<batchy.Scope {self.name or hex(id(self))} loaders={len(self._caches)}>"

    def cache_for(self, loader: object) -> dict[Any, Any]:
        """The cache dict (cache key -> future) of ``loader`` in this scope."""
        cache = self._caches.get(loader)
        if cache is None:
            cache = self._caches[loader] = {}
        return cache

    def clear(self) -> None:
        """Forget every cached value of every loader in this scope."""
        self._caches.clear()

    def __enter__(self) -> Scope:
        # Tokens live in the context, not on the scope: concurrent tasks may each
        # enter the same scope (one per request handler, say) and exit in any order.
        _tokens.set((*_tokens.get(), _current.set(self)))
        with _entries:
            self._depth += 1
            first = self._depth == 1
        if first and _hooks.scoped:
            _hooks.emit_scope_entered(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tokens = _tokens.get()
        token = tokens[-1] if tokens else None
        if token is None or token.var is not _current or _current.get() is not self:
            raise UsageError(
                f"{self!r} was exited without being the current scope; enter and exit "
                "scopes in nested 'with' blocks, in the same task"
            )
        _tokens.set(tokens[:-1])
        _current.reset(token)
        with _entries:
            self._depth -= 1
            last = self._depth == 0
        if last and _hooks.scoped:
            _hooks.emit_scope_exited(self)

    async def __aenter__(self) -> Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def scope(name: str | None = None) -> Scope:
    """A new scope; enter it with ``with`` or ``async with`` to make it current."""
    return Scope(name)


def current_scope() -> Scope | None:
    """The scope of the running handler, else the one entered with ``batchy.scope()``."""
    sched = current_scheduler()
    if sched is not None and sched.current is not None:
        return sched.current._scope  # type: ignore[no-any-return]
    return _current.get()
