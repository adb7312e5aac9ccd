"""The execution context class that runs graphql-core on batchy: BatchyMixin and with_batchy.

What the class does, and why, is told in ``batchy_contrib.graphql`` (the public
module, which re-exports it with the entry points).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import graphql as gql
from graphql import OperationType

import batchy

from ._async import AsyncMixin, is_handler, run_generator, start_in_scope
from ._executor import execute_planned
from ._plan import overridden_hooks, uses_incremental_delivery
from .limits import Limits

__all__ = [
    "LIMITS",
    "BatchyExecutionContext",
    "BatchyMixin",
    "GRAPHQL_CORE_33",
    "is_awaitable",
    "resolve_handlers",
    "with_batchy",
]

T = TypeVar("T")

#: True on graphql-core 3.3 (``Executor``), False on 3.2 (``ExecutionContext``).
GRAPHQL_CORE_33: bool = hasattr(gql.execution, "Executor")

# graphql-core's own default class for `execute`, that we subclass (by name, so
# that one source type-checks against either line).
_Base: type[Any] = (
    importlib.import_module("graphql.execution.incremental").IncrementalExecutor
    if GRAPHQL_CORE_33
    else gql.execution.ExecutionContext  # type: ignore[attr-defined,unused-ignore]
)
# What with_batchy() accepts: any execution context class of the installed line.
_Root: type[Any] = getattr(gql.execution, "Executor" if GRAPHQL_CORE_33 else "ExecutionContext")


# -- helpers ------------------------------------------------------------------------


@batchy.task
async def _run_awaitable(aw: Awaitable[T]) -> T:
    # Steps an awaitable graphql-core made (a coroutine of its own) as a batchy task.
    return await aw


def resolve_handlers(next_: Callable[..., Any], root: Any, info: Any, **args: Any) -> Any:
    """graphql-core middleware: a generator returned by a resolver runs as a batchy handler.

    :data:`BatchyExecutionContext` does this itself; the middleware is for plain
    graphql-core async execution (``middleware=[resolve_handlers]``), where
    loader futures and ``async def`` resolvers work as they are.
    """
    result = next_(root, info, **args)
    if is_handler(result):
        return run_generator(result, f"{info.parent_type.name}.{info.field_name}")
    return result


def _is_query(operation: Any) -> bool:
    return getattr(operation, "operation", None) is OperationType.QUERY


async def _await(aw: Awaitable[T]) -> T:
    # graphql-core awaits coroutines; a batchy task is awaitable, but while the
    # fast path runs graphql-core must not see futures as awaitable.
    return await aw


def is_awaitable(value: Any) -> bool:
    # graphql-core's sync entry points pass a predicate that says "never"; the
    # futures of batchy must be awaited all the same, so we keep our own.
    if type(value) in _NOT_AWAITABLE:
        return False
    return isinstance(value, batchy.Future) or inspect.isawaitable(value)


#: The limits the next execution context built in this context takes (set by
#: the entry points around graphql-core's call, taken by the context's __init__).
LIMITS: contextvars.ContextVar[Limits | None] = contextvars.ContextVar(
    "batchy_graphql_limits", default=None
)

# What _planned_32 returns when graphql-core's own execution runs instead.
_NOT_PLANNED = object()

_NOT_AWAITABLE = frozenset({dict, list, str, int, float, bool, type(None), tuple})


# -- the execution context ------------------------------------------------------------


class BatchyMixin(AsyncMixin):
    """Mix into a graphql-core execution context class to run it on batchy.

    Prefer :func:`with_batchy` (which checks the base class) or the ready-made
    :data:`BatchyExecutionContext`.
    """

    batchy_scope: batchy.Scope
    is_awaitable: Callable[[Any], bool]

    #: The run-time limits (``max_objects``, ``time_budget``) of the planned
    #: executor; set with ``with_batchy(cls, limits=...)`` or the entry points'
    #: ``limits=``.
    batchy_limits: Limits | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = LIMITS.get()
        if limits is not None:
            self.batchy_limits = limits
            # Taken: an execution a resolver starts does not inherit it.
            LIMITS.set(None)
        self.is_awaitable = is_awaitable
        # graphql-core's complete_value, bound once: ours runs for every value.
        self._core_complete = super(AsyncMixin, self).complete_value  # type: ignore[misc]
        # A request that already runs in a scope (entered by the web framework
        # around the whole request) keeps it; otherwise this execution is one.
        self.batchy_scope = batchy.current_scope() or batchy.Scope("graphql")

    def build_per_event_executor(self, payload: Any) -> Any:
        # graphql-core 3.3 runs each subscription event on a shallow copy of the
        # subscription's executor: with its scope, every event after the first got
        # the first event's values from the loaders' cache. An event is an
        # execution of its own.
        executor = super().build_per_event_executor(payload)  # type: ignore[misc]
        executor.batchy_scope = batchy.Scope("graphql")
        return executor

    #: Run queries and mutations on the planned executor (graphql_executor.py).
    #: Set to False in a subclass to keep graphql-core's async execution for
    #: everything (it is slower, and the batches are the same).
    batchy_fast_path = True

    def execute_operation(self, *args: Any, **kwargs: Any) -> Any:
        # Root resolvers run right now, in this call: loads they make belong to
        # the request's scope.
        with self.batchy_scope:
            planned = _NOT_PLANNED if GRAPHQL_CORE_33 else self._planned_32(*args, **kwargs)
            if planned is not _NOT_PLANNED:
                result = self._deferred_result(planned)
            else:
                result = super().execute_operation(*args, **kwargs)  # type: ignore[misc]
        if not is_awaitable(result):
            return result
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            # No loop: a sync entry point (graphql_sync, graphene's execute, a
            # Flask view). Finish here, on a loop of our own, batched.
            return batchy.run(_run_awaitable(result), scope=self.batchy_scope)
        return self._drive(result)

    def _planned_32(self, operation: Any, root_value: Any) -> Any:
        # graphql-core 3.2: queries and mutations on the planned executor.
        if operation.operation is OperationType.SUBSCRIPTION or not self._use_planned():
            return _NOT_PLANNED
        root_type = self.schema.get_root_type(operation.operation)  # type: ignore[attr-defined]
        if root_type is None:
            return _NOT_PLANNED  # graphql-core raises the error
        try:
            grouped: Any = gql.execution.collect_fields.collect_fields(  # type: ignore[call-arg,unused-ignore]
                self.schema,  # type: ignore[attr-defined]
                self.fragments,  # type: ignore[attr-defined]
                self.variable_values,  # type: ignore[attr-defined]
                root_type,
                operation.selection_set,
            )
        except RecursionError:
            return _NOT_PLANNED  # graphql-core reports the query as nested too deeply
        serially = operation.operation is OperationType.MUTATION
        limits = self.batchy_limits
        return execute_planned(self, root_type, root_value, grouped, serially, limits)

    def execute_collected_root_fields(
        self,
        root_type: Any,
        root_value: Any,
        grouped_field_set: Any,
        serially: bool,
        new_defer_usages: Any,
    ) -> Any:
        # graphql-core 3.3 only: the root fields of a query or mutation.
        if (
            new_defer_usages
            or self.abort_signal is not None  # type: ignore[attr-defined]
            or (self.schema.get_directive("stream") and self._streams())  # type: ignore[attr-defined]
            or not self._use_planned()
        ):
            parent = super().execute_collected_root_fields  # type: ignore[misc]
            return parent(root_type, root_value, grouped_field_set, serially, new_defer_usages)
        planned = execute_planned(
            self, root_type, root_value, grouped_field_set, serially, self.batchy_limits
        )
        return self._deferred_result(planned)

    def _use_planned(self) -> bool:
        # The planned executor runs unless turned off, and unless the class
        # overrides a hook it would not call: graphql-core's execution honours it.
        # fragment cycle: graphql-core's execution honours the first.
        if not self.batchy_fast_path:
            return False
        cls = type(self)
        plain = _PLAIN_CLASSES.get(cls)
        if plain is None:
            plain = _PLAIN_CLASSES[cls] = not overridden_hooks(cls, (BatchyMixin, AsyncMixin))
        return plain

    def _streams(self) -> bool:
        # @stream is only seen when a list completes: look for it in the document.
        fragments = self.fragments.values()  # type: ignore[attr-defined]
        return any(uses_incremental_delivery(n) for n in (self.operation, *fragments))  # type: ignore[attr-defined]

    def _deferred_result(self, root: Any) -> Any:
        # The planned executor's data, or (when values were pending) the task
        # that completes it.
        if not isinstance(root, batchy.Task):
            return root
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return batchy.run(root, scope=self.batchy_scope)
        return _await(root)

    async def _drive(self, result: Awaitable[T]) -> T:
        # Awaited from asyncio (a framework's coroutine): the execution itself
        # runs as a batchy task in the request's scope.
        task = start_in_scope(_await(_run_awaitable(result)), self.batchy_scope)
        try:
            return await task  # type: ignore[no-any-return]
        finally:
            task.cancel()  # a no-op when done; stops the execution when we are cancelled


# Execution context classes that override no hook the planned executor bypasses.
_PLAIN_CLASSES: weakref.WeakKeyDictionary[type[Any], bool] = weakref.WeakKeyDictionary()


def with_batchy(base: type[T], *, limits: Limits | None = None) -> type[T]:
    """A subclass of the execution context class ``base`` that runs on batchy.

    Use it to keep a framework's own class, e.g. strawberry's::

        from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
        schema = strawberry.Schema(
            Query, execution_context_class=with_batchy(StrawberryGraphQLCoreExecutionContext)
        )

    ``limits``: the :class:`Limits` whose ``max_objects`` and ``time_budget``
    every execution of the class enforces (its validation rules are the
    framework's to add: ``limits.rules()``).
    """
    if not (isinstance(base, type) and issubclass(base, _Root)):
        raise batchy.UsageError(
            f"with_batchy() takes a graphql-core execution context class (a subclass of "
            f"graphql.execution.{_Root.__name__} on graphql-core {gql.__version__}), got "
            f"{base!r}. Pass the class itself, not an instance, and check that it comes "
            "from the graphql-core this process imports."
        )
    if issubclass(base, BatchyMixin):
        if limits is None:
            return base
        return type(base.__name__, (base,), {"batchy_limits": limits})
    namespace = {} if limits is None else {"batchy_limits": limits}
    return type(f"Batchy{base.__name__}", (BatchyMixin, base), namespace)


#: graphql-core's default execution context class, running on batchy. Pass it as
#: ``execution_context_class=`` (graphql-core 3.2, graphene, ariadne) or
#: ``executor_class=`` (graphql-core 3.3); the entry points below use it.
BatchyExecutionContext: type[Any] = with_batchy(_Base)
