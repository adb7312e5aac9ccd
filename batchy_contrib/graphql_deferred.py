"""The fast path of the GraphQL integration: queries run on graphql-core's sync code, batchy waits.

graphql-core's async execution turns every awaitable field into a coroutine and
gathers each object's fields and each list's items as asyncio tasks. For a feed
of 50 posts with 20 comments each that is thousands of coroutines and tasks, and
they cost more than the resolvers. This module runs a query on graphql-core's
*sync* code instead, which is its fastest, and lets batchy do the waiting:

- a resolver's batchy future (a loader future, a task, a generator handler) is
  not awaited by graphql-core. ``complete_value`` puts a *placeholder* in its
  place: a batchy task that waits for the future, completes the value with
  graphql-core's own ``complete_value`` (which may leave placeholders of its
  own, one level down), and returns the finished subtree;
- each placeholder, once its value is complete, waits for the placeholders in
  it all at once and puts their results in their places. The root does the same
  for the whole response. A slow subtree holds back nobody else;
- ``async def`` resolvers still return coroutines, which graphql-core awaits
  as usual; a placeholder that meets one waits for it.

Errors follow the spec as graphql-core's sync execution does: a field error is
handled at the field (null and an error if the field is nullable), and an error
of a non-null field travels up to the nearest nullable position, which becomes
null. Because the enclosing values were completed earlier, the error travels as
:class:`_Propagate` through the placeholders, and the types of the positions in
between are looked up in a table that ``complete_value`` fills on the way.

Used for queries only: mutations run their root fields one after another, and
incremental delivery (``@defer``/``@stream``) streams parts; both keep
graphql-core's async execution.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator
from types import GeneratorType
from typing import Any, TypeVar

import graphql as gql
from graphql import GraphQLError, is_non_null_type, located_error

import batchy

__all__ = ["DeferredMixin", "run_generator", "start_in_scope"]

T = TypeVar("T")


class _Propagate(Exception):
    """A non-null field failed: null the nearest nullable position above ``path``."""

    def __init__(self, error: GraphQLError, path: Any) -> None:
        super().__init__(error)
        self.error = error
        self.path = path


def _not_awaitable_if_batchy(value: Any) -> bool:
    # While deferring, batchy futures are values to graphql-core; placeholders
    # replace them in complete_value. Everything else as graphql-core sees it.
    if type(value) in _PLAIN:
        return False
    return hasattr(value, "__await__") and not isinstance(value, batchy.Future)


_PLAIN = frozenset({dict, list, str, int, float, bool, type(None), tuple})
# Values that complete to themselves (or fail): never a future, never above another field.
_LEAVES = frozenset({str, int, float, bool, type(None)})
# Completed values with no placeholder inside unless one was made while completing them.
_SETTLED = _LEAVES | {dict, list}

# 3.3's handle_field_error locates the error itself and takes the field details;
# 3.2's takes an error its caller located.
_HANDLE_TAKES_NODES = hasattr(gql.execution, "Executor")


def _find(value: Any, found: list[tuple[Any, Any, batchy.Future[Any]]]) -> None:
    """Collect the placeholders inside a completed value as (container, key, placeholder)."""
    if type(value) is dict:
        items: Any = value.items()
    elif type(value) is list:
        items = enumerate(value)
    else:
        return
    for key, item in items:
        if isinstance(item, batchy.Future):
            found.append((value, key, item))
        elif type(item) is dict or type(item) is list:
            _find(item, found)


@batchy.task
def _complete(ctx: DeferredMixin, args: tuple[Any, ...], future: Any) -> Generator[Any, Any, Any]:
    # One deferred field (or list item): graphql-core's execute_field, in steps.
    return_type, nodes, info, path = args[:4]
    try:
        value = yield future
        fresh: list[tuple[batchy.Task[Any], Any]] = []
        ctx._batchy_fresh = fresh
        try:
            completed = ctx.complete_value(return_type, nodes, info, path, value, *args[4:])
        finally:
            ctx._batchy_fresh = None
        if fresh or type(completed) not in _SETTLED:
            completed = yield from ctx._settle(completed, path, fresh)
        return completed
    except _Propagate as propagated:
        error: Exception = propagated.error
    except Exception as raw:
        error = raw
    ctx._field_error(error, return_type, nodes, path)  # raises _Propagate for non-null
    return None


@batchy.task
def _root(ctx: DeferredMixin, run: Callable[[], Any]) -> Generator[Any, Any, Any]:
    fresh: list[tuple[batchy.Task[Any], Any]] = []
    ctx._batchy_fresh = fresh
    try:
        data = _on_fresh_stack(run)
    finally:
        ctx._batchy_fresh = None
    try:
        return (yield from ctx._settle(data, None, fresh))
    except _Propagate as propagated:
        # No nullable position up to the root: the whole data is null.
        raise propagated.error from None


@batchy.task
def _run_generator(gen: Generator[Any, Any, T], field: str) -> Generator[Any, Any, T]:
    # Steps a generator returned by a plain resolver as a batchy handler. (The
    # public API makes tasks from decorated functions, so this one delegates.)
    try:
        return (yield from gen)
    except batchy.YieldError as error:
        # The engine names this wrapper; name the resolver instead.
        message = str(error)
        code = gen.gi_code  # type: ignore[attr-defined]
        where = f"{code.co_qualname}() at {code.co_filename}:{code.co_firstlineno}"
        raise batchy.YieldError(
            f"resolver of {field} ({where}){message[message.find(' yielded ') :]}"
        ) from None


def run_generator(gen: Generator[Any, Any, Any], info: Any) -> batchy.Task[Any]:
    """The batchy task that runs ``gen``, a generator returned by the resolver of ``info``."""
    return _run_generator(gen, f"{info.parent_type.name}.{info.field_name}")


def _make_on_fresh_stack() -> Callable[..., Any]:
    # CPython 3.11 keeps frames in 16 KiB chunks and frees a chunk as soon as its
    # last frame returns. Deep, hot recursion (graphql-core completing a large
    # response) that goes back and forth across a chunk boundary allocates and
    # frees a chunk (an mmap) on every crossing: measured here, the same query
    # takes 20 ms or 45-70 ms depending only on how deep the caller's stack is
    # (and the scheduler's stack is deep enough). A frame of just over 16 KiB
    # always starts a chunk of 32 KiB of its own, leaving ~16 KiB for the calls
    # above it: they run without crossing, at a cost of ~10 us per call, paid
    # once per query.
    names = " = ".join(f"_{i}" for i in range(2100))
    source = (
        f"def on_fresh_stack(fn, *args):\n    if 0:\n        {names} = 0\n    return fn(*args)\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # the dead assignment only declares the locals
    fn: Callable[..., Any] = namespace["on_fresh_stack"]
    return fn


_on_fresh_stack = _make_on_fresh_stack()


def _locate(value: Any, own_path: Any, path: Any) -> tuple[Any, Any]:
    """The container and key of position ``path`` inside ``value``, the value at ``own_path``."""
    keys = []
    while path is not own_path and path is not None:
        keys.append(path.key)
        path = path.prev
    container = value
    for i in range(len(keys) - 1, 0, -1):
        container = container[keys[i]]
    return container, keys[0]


def _complete_value_33(
    self: DeferredMixin,
    return_type: Any,
    nodes: Any,
    info: Any,
    path: Any,
    result: Any,
    context: Any,
) -> Any:
    # The hot path of the integration: graphql-core calls it for every field and
    # list item. Leaf values go straight through.
    if type(result) in _LEAVES:
        return self._core_complete(return_type, nodes, info, path, result, context)
    return self._complete_any(return_type, nodes, info, path, result, (context,))


def _complete_value_32(
    self: DeferredMixin, return_type: Any, nodes: Any, info: Any, path: Any, result: Any
) -> Any:
    if type(result) in _LEAVES:
        return self._core_complete(return_type, nodes, info, path, result)
    return self._complete_any(return_type, nodes, info, path, result, ())


async def _start(placeholder: batchy.Task[Any]) -> None:
    # Its parent reads the outcome when it settles; here it only has to start.
    with contextlib.suppress(Exception):
        await placeholder


def start_in_scope(aw: Any, scope: batchy.Scope) -> asyncio.Future[Any]:
    """Run ``aw`` as an asyncio task whose context has ``scope`` current.

    The scope is entered and left right here, around the task's creation (which
    copies the context), never across an ``await``: one scope serves many
    concurrent tasks, and ``with scope:`` held across an await in two of them
    would leave them in the wrong order.
    """
    with scope:
        task: asyncio.Future[Any] = asyncio.ensure_future(aw)
    return task


class DeferredMixin:
    """Execution-context methods of the fast path (see the module docstring)."""

    _batchy_deferred = False
    _batchy_types: dict[int, tuple[Any, Any]]
    is_awaitable: Callable[[Any], bool]
    collected_errors: Any

    _batchy_fresh: list[tuple[batchy.Task[Any], Any]] | None = None
    _core_complete: Callable[..., Any]
    _batchy_started: set[Any]
    batchy_scope: batchy.Scope

    #: graphql-core's complete_value with batchy's futures deferred (3.3 passes one
    #: more argument than 3.2; a signature per line keeps the hot path short).
    complete_value: Callable[..., Any] = (
        _complete_value_33 if _HANDLE_TAKES_NODES else _complete_value_32
    )

    def _core_is_awaitable(self, value: Any) -> bool:
        return hasattr(value, "__await__") and not isinstance(value, batchy.Future)

    def _start_now(self, placeholder: batchy.Task[Any]) -> None:
        # A placeholder made inside graphql-core's own coroutine (after an async
        # def resolver awaited): nothing of ours will yield it before that
        # coroutine ends, so an asyncio task starts it now, in our scope.
        task = start_in_scope(_start(placeholder), self.batchy_scope)
        self._batchy_started.add(task)
        task.add_done_callback(self._batchy_started.discard)

    def _execute_deferred(self, run: Callable[[], Any]) -> batchy.Task[Any]:
        """The root task: run the sync part, then settle every placeholder."""
        self._batchy_deferred = True
        self._batchy_types = {}
        self._batchy_started = set()
        self.is_awaitable = _not_awaitable_if_batchy
        return _root(self, run)

    def _complete_any(
        self, return_type: Any, nodes: Any, info: Any, path: Any, result: Any, rest: tuple[Any, ...]
    ) -> Any:
        # complete_value of everything that is not a leaf value.
        if type(result) is GeneratorType and result.gi_code.co_name != "<genexpr>":
            result = run_generator(result, info)
        if isinstance(result, batchy.Future):
            args = (return_type, nodes, info, path, *rest)
            if not self._batchy_deferred:
                return self._complete_later(result, args)
            placeholder = _complete(self, args, result)
            fresh = self._batchy_fresh
            if fresh is not None:
                fresh.append((placeholder, path))
            else:
                self._start_now(placeholder)
            return placeholder
        if self._batchy_deferred:
            # Remember the type of every position above a leaf: an error of a
            # non-null field below it may have to null it later.
            self._batchy_types[id(path)] = (path, return_type)
        return self._core_complete(return_type, nodes, info, path, result, *rest)

    async def _complete_later(self, future: batchy.Future[Any], args: tuple[Any, ...]) -> Any:
        # graphql-core's async execution (a mutation): a generator's task is
        # awaited here; graphql-core handles the errors of the coroutine.
        value = await future
        completed = self.complete_value(*args[:4], value, *args[4:])
        if self.is_awaitable(completed):
            completed = await completed
        return completed

    def _field_error(self, error: Exception, return_type: Any, nodes: Any, path: Any) -> None:
        """graphql-core's handling of a field error; a non-null one becomes ``_Propagate``."""
        try:
            if _HANDLE_TAKES_NODES:
                self.handle_field_error(error, return_type, nodes, path)  # type: ignore[attr-defined]
            else:
                located = located_error(error, nodes, path.as_list())
                self.handle_field_error(located, return_type, path)  # type: ignore[attr-defined]
        except GraphQLError as located_err:
            raise _Propagate(located_err, path) from None

    def _settle(
        self, value: Any, own_path: Any, fresh: list[tuple[batchy.Task[Any], Any]]
    ) -> Generator[Any, Any, Any]:
        """Wait for the placeholders in ``value`` (completed at ``own_path``) and fill them in.

        ``fresh`` are the placeholders made while ``value`` was completed, with
        their paths: their places are found from the paths. When graphql-core
        returned a coroutine instead (an ``async def`` resolver below), they
        start at once, because the coroutine holds the objects that hold them
        until it is done; its result is then searched for placeholders, which
        also finds those made inside it.
        """
        found: list[tuple[Any, Any, batchy.Future[Any]]] = []
        if self._core_is_awaitable(value):
            if fresh:
                tasks = batchy.gather(*(f for f, _ in fresh), return_exceptions=True)
                value, _ = yield (value, tasks)
            else:
                value = yield value
            _find(value, found)
        elif isinstance(value, batchy.Future):
            return (yield value)  # the value was a future that gave a future
        else:
            for placeholder, path in fresh:
                container, key = _locate(value, own_path, path)
                found.append((container, key, placeholder))
        if not found:
            return value
        results = yield batchy.gather(*(f for _, _, f in found), return_exceptions=True)
        propagated: _Propagate | None = None
        for (container, key, _), result in zip(found, results, strict=True):
            if isinstance(result, _Propagate):
                if propagated is None and not self._null_below(value, own_path, result):
                    propagated = result
            elif isinstance(result, BaseException):
                raise result  # not a field error: a bug of ours or an interrupt
            else:
                container[key] = result
        if propagated is not None:
            raise propagated
        return value

    def _null_below(self, value: Any, own_path: Any, failed: _Propagate) -> bool:
        """Null the nearest nullable position between ``failed.path`` and ``own_path``.

        Returns False when there is none: the error is ours to handle.
        """
        types = self._batchy_types
        path = failed.path.prev
        while path is not own_path and path is not None:
            _, return_type = types.get(id(path), (None, None))
            if return_type is not None and not is_non_null_type(return_type):
                keys = []
                p = path
                while p is not own_path and p is not None:
                    keys.append(p.key)
                    p = p.prev
                container = value
                for key in reversed(keys[1:]):
                    if container is None:
                        return True  # already nulled above: the error is dropped
                    container = container[key]
                if container is not None:
                    container[keys[0]] = None
                self.collected_errors.add(failed.error, path)
                return True
            path = path.prev
        return False
