"""Scopes: where loader caches live (one run, one request, one job), so nothing leaks between them.

A task runs in the scope it was started in and passes it to the tasks it starts.
Code outside any task finds its scope in a context variable, set by
``with batchy.scope():`` / ``async with batchy.scope():``. Batches are not
per scope: keys from many scopes in one round share one batch call, and each
scope's cache keeps its own copy of the answer.
"""

from __future__ import annotations

import contextvars
from types import TracebackType
from typing import Any

from ._errors import UsageError
from ._scheduler import current_scheduler

__all__ = ["Scope", "current_scope", "scope"]

_current: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "batchy_scope", default=None
)
_tokens: contextvars.ContextVar[tuple[contextvars.Token[Scope | None], ...]] = (
    contextvars.ContextVar("batchy_scope_tokens", default=())
)


class Scope:
    """One cache per loader, for one unit of work.

    Use it as a context manager (sync or async) to make it current::

        async with batchy.scope():
            user = await users_by_id(1)   # cached for the rest of the block
    """

    __slots__ = ("_caches", "name")

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._caches: dict[object, dict[Any, Any]] = {}

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
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tokens = _tokens.get()
        if not tokens or tokens[-1].var is not _current or _current.get() is not self:
            raise UsageError(
                f"{self!r} was exited without being the current scope; enter and exit "
                "scopes in nested 'with' blocks, in the same task"
            )
        *outer, token = tokens
        _tokens.set(tuple(outer))
        _current.reset(token)

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
