"""Task functions: ``@batchy.task`` and the callables it makes, which start handlers as tasks.

Calling a task function is the most frequent thing a page does (one call per
handler), so each decorated handler gets a ``__call__`` generated with the
handler's own parameters: no ``*args`` / ``**kwargs`` packing, and the task is
built without an ``__init__`` frame. This is the same technique dataclasses use
for ``__init__``.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ._errors import UsageError
from ._future import PENDING
from ._task import Handler, Task, _CoroTask, _new_task

__all__ = ["TaskFunction", "task"]

T = TypeVar("T")
P = ParamSpec("P")


# The body of TaskFunction.__call__ (Task.__init__ inlined: pages make tens of
# thousands of tasks), generated per handler with the handler's parameters.
_CALL_TEMPLATE = """
def __call__({params}):
    _batchy_t = _batchy_new(_batchy_Task)
    _batchy_t._state = _batchy_PENDING
    _batchy_t._value = None
    _batchy_t._waiters = None
    _batchy_t._coro = _batchy_fn({args})
    _batchy_t._func = _batchy_fn
    _batchy_t._is_coro = _batchy_is_coro
    _batchy_t._sched = None
    _batchy_t._scope = None
    _batchy_t._waiting = None
    _batchy_t._keys = None
    _batchy_t._remaining = 0
    _batchy_t._cancel = None{extra}
    return _batchy_t
"""


def _fast_call(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """A ``__call__`` with ``fn``'s own parameters, or None if they cannot be copied."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params: list[str] = []
    args: list[str] = []
    defaults: dict[str, Any] = {}
    kinds = inspect.Parameter
    for name, p in sig.parameters.items():
        if name.startswith("_batchy_"):
            return None
        text = name
        if p.default is not kinds.empty:
            defaults[name] = p.default
            text += f"=_batchy_defaults[{name!r}]"
        if p.kind is kinds.VAR_POSITIONAL:
            params.append(f"*{name}")
            args.append(f"*{name}")
        elif p.kind is kinds.VAR_KEYWORD:
            params.append(f"**{name}")
            args.append(f"**{name}")
        elif p.kind is kinds.KEYWORD_ONLY:
            if not any(x.startswith("*") for x in params):
                params.append("*")
            params.append(text)
            args.append(f"{name}={name}")
        else:
            params.append(text)
            args.append(name)
        if p.kind is kinds.POSITIONAL_ONLY and not any(
            q.kind is kinds.POSITIONAL_ONLY for q in list(sig.parameters.values())[len(params) :]
        ):
            params.append("/")
    namespace: dict[str, Any] = {
        "_batchy_new": _new_task,
        "_batchy_Task": _CoroTask if inspect.iscoroutinefunction(fn) else Task,
        "_batchy_PENDING": PENDING,
        "_batchy_fn": fn,
        "_batchy_is_coro": inspect.iscoroutinefunction(fn),
        "_batchy_defaults": defaults,
    }
    extra = "\n    _batchy_t._cancel_requests = 0" if inspect.iscoroutinefunction(fn) else ""
    source = _CALL_TEMPLATE.format(params=", ".join(params), args=", ".join(args), extra=extra)
    # Named, so a coroutine's creation stack (asyncio debug mode) can skip this frame.
    exec(compile(source, f"<batchy.task {fn.__qualname__}>", "exec"), namespace)
    call: Callable[..., Any] = namespace["__call__"]
    # Argument errors then name the handler: "post_view() missing 1 required ...".
    call.__name__ = fn.__name__
    call.__qualname__ = fn.__qualname__
    return call


class TaskFunction(Generic[P, T]):
    """A handler decorated with :func:`batchy.task`; calling it makes a :class:`Task`."""

    def __init__(self, fn: Callable[P, Handler[T]]) -> None:
        if not (inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn)):
            raise UsageError(
                f"@batchy.task expects a generator function (one that yields) or an "
                f"async def; {getattr(fn, '__qualname__', fn)!r} is neither. Yield the "
                "futures it waits on, or make it async def and await them."
            )
        self.fn = fn
        self._is_coro = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __new__(cls, fn: Callable[P, Handler[T]]) -> TaskFunction[P, T]:
        # Each decorated handler gets a subclass whose __call__ has the handler's
        # own signature (see _fast_call): calling it then packs no *args tuple
        # and **kwargs dict, which is a measurable share of a task's cost.
        kind = cls
        if cls is TaskFunction:
            call = _fast_call(fn)
            if call is not None:
                # A staticmethod, so no self parameter: argument errors then give
                # Python's own counts ("takes 1 positional argument but 3 were given").
                kind = type(cls.__name__, (cls,), {"__call__": staticmethod(call), "__slots__": ()})
        return super().__new__(kind)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Task[T]:
        t: Task[T] = _new_task(_CoroTask if self._is_coro else Task)
        t._state = PENDING
        t._value = None
        t._waiters = None
        t._coro = self.fn(*args, **kwargs)
        t._func = self.fn
        t._is_coro = self._is_coro
        t._sched = None
        t._scope = None
        t._waiting = None
        t._keys = None
        t._remaining = 0
        t._cancel = None
        if isinstance(t, _CoroTask):
            t._cancel_requests = 0
        return t

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        # Decorated methods: bind like a function would.
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<batchy.task {self.fn.__qualname__}>"


@overload
def task(fn: Callable[P, Generator[Any, Any, T]]) -> TaskFunction[P, T]: ...
@overload
def task(fn: Callable[P, Coroutine[Any, Any, T]]) -> TaskFunction[P, T]: ...
def task(fn: Callable[P, Any]) -> TaskFunction[P, Any]:
    """Make a handler: a generator function that yields futures, or an ``async def``.

    Calling the result gives a :class:`Task`, which starts when it is first
    yielded, awaited or run (a task dropped before it started warns with a
    ``RuntimeWarning``, as asyncio does for a coroutine never awaited)::

        @batchy.task
        def comment_view(cid):
            comment = yield comments_by_id(cid)
            author = yield users_by_id(comment["user_id"])
            return {**comment, "author": author}
    """
    return TaskFunction(fn)
