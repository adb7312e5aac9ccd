"""GraphQL on batchy: graphql-core execution in which every resolver's loads share batchy's rounds.

Resolvers may return a loader future (``users_by_id(post.author_id)``), be
generator handlers (``author = yield users_by_id(...)``), ``async def``
functions that await loaders, or ``@batchy.task`` handlers. Whatever their
style and however many loop hops each takes, their keys meet in one batch per
loader per round, because batchy flushes only when nothing can go on.

One class does the work, for both graphql-core lines (3.2's ``ExecutionContext``,
3.3's ``Executor``): :data:`BatchyExecutionContext`. Give it to any framework
that takes an execution context class (graphene, ariadne, strawberry), or use
the entry points here:

- ``await execute(schema, document, ...)`` / ``await graphql(schema, source, ...)``
  for async servers;
- ``execute_sync(...)`` / ``graphql_sync(...)`` for sync servers (Flask, Django):
  no event loop in your code, and the resolvers batch all the same.

What the class does, and why:

1. **Queries and mutations run on the planned executor** (``graphql_executor.py``):
   one batchy handler completes the whole response from plans made once per
   selection; a position whose value is pending (a loader future, a task, a
   generator or ``async def`` resolver) is completed when its value arrives. No
   coroutine and no asyncio task per field.
2. **One scope per request.** Each execution gets its own :class:`batchy.Scope`
   (or joins the one that is current when it starts), so loader caches never
   leak between requests.
3. **Rounds span the whole query.** batchy's scheduler flushes a round only when
   its own handlers are blocked *and* the loop has nothing ready, so every
   resolver's keys of one level meet in one batch, however many loop hops each
   took.
4. **The rest keeps graphql-core's async execution** (``@defer``/``@stream``,
   ``batchy_fast_path = False``), where generators still become handlers
   (``graphql_async.py``); graphql-core would read them as lists.
5. **Sync when there is no loop.** When nothing runs an event loop (a Flask
   view, graphene's ``schema.execute``, graphql-core's ``graphql_sync``), the
   execution is run to its end with :func:`batchy.run` before it returns.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import graphql as gql
from graphql import DocumentNode, ExecutionResult, GraphQLSchema, OperationType

import batchy

from ._graphql_plan import overridden_hooks, uses_incremental_delivery
from .graphql_async import AsyncMixin, is_handler, run_generator, start_in_scope
from .graphql_executor import execute_planned

__all__ = [
    "BatchyExecutionContext",
    "BatchyMixin",
    "GRAPHQL_CORE_33",
    "execute",
    "execute_sync",
    "graphql",
    "graphql_sync",
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


def _is_awaitable(value: Any) -> bool:
    # graphql-core's sync entry points pass a predicate that says "never"; the
    # futures of batchy must be awaited all the same, so we keep our own.
    if type(value) in _NOT_AWAITABLE:
        return False
    return isinstance(value, batchy.Future) or inspect.isawaitable(value)


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.is_awaitable = _is_awaitable
        # graphql-core's complete_value, bound once: ours runs for every value.
        self._core_complete = super(AsyncMixin, self).complete_value  # type: ignore[misc]
        # A request that already runs in a scope (entered by the web framework
        # around the whole request) keeps it; otherwise this execution is one.
        self.batchy_scope = batchy.current_scope() or batchy.Scope("graphql")

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
        if not _is_awaitable(result):
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
        return execute_planned(self, root_type, root_value, grouped, serially)

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
        planned = execute_planned(self, root_type, root_value, grouped_field_set, serially)
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


def with_batchy(base: type[T]) -> type[T]:
    """A subclass of the execution context class ``base`` that runs on batchy.

    Use it to keep a framework's own class, e.g. strawberry's::

        from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
        schema = strawberry.Schema(
            Query, execution_context_class=with_batchy(StrawberryGraphQLCoreExecutionContext)
        )
    """
    if not (isinstance(base, type) and issubclass(base, _Root)):
        raise batchy.UsageError(
            f"with_batchy() takes a graphql-core execution context class (a subclass of "
            f"graphql.execution.{_Root.__name__} on graphql-core {gql.__version__}), got "
            f"{base!r}. Pass the class itself, not an instance, and check that it comes "
            "from the graphql-core this process imports."
        )
    if issubclass(base, BatchyMixin):
        return base
    return type(f"Batchy{base.__name__}", (BatchyMixin, base), {})


#: graphql-core's default execution context class, running on batchy. Pass it as
#: ``execution_context_class=`` (graphql-core 3.2, graphene, ariadne) or
#: ``executor_class=`` (graphql-core 3.3); the entry points below use it.
BatchyExecutionContext: type[Any] = with_batchy(_Base)


# -- entry points ---------------------------------------------------------------------


def _context_kwargs(cls: type[Any] | None) -> dict[str, Any]:
    name = "executor_class" if GRAPHQL_CORE_33 else "execution_context_class"
    return {name: cls if cls is not None else BatchyExecutionContext}


def _check_class(cls: type[Any] | None, where: str) -> type[Any] | None:
    if cls is not None and not (isinstance(cls, type) and issubclass(cls, BatchyMixin)):
        raise batchy.UsageError(
            f"{where}(execution_context_class={cls!r}): the class must run on batchy; "
            f"wrap it: execution_context_class=with_batchy({getattr(cls, '__name__', cls)})"
        )
    return cls


def _class_kwargs(where: str, cls: type[Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    # Our entry points take `execution_context_class=` on both lines; graphql-core
    # 3.3 names it `executor_class=`, which is taken too.
    if _CLASS_ARG in kwargs and _CLASS_ARG != "execution_context_class":
        if cls is not None:
            raise TypeError(
                f"{where}() got both execution_context_class= and {_CLASS_ARG}=; pass one"
            )
        cls = kwargs.pop(_CLASS_ARG)
    return _context_kwargs(_check_class(cls, where))


_CLASS_ARG = "executor_class" if GRAPHQL_CORE_33 else "execution_context_class"


def execute(
    schema: GraphQLSchema,
    document: DocumentNode,
    root_value: Any = None,
    context_value: Any = None,
    variable_values: dict[str, Any] | None = None,
    operation_name: str | None = None,
    *,
    execution_context_class: type[Any] | None = None,
    **kwargs: Any,
) -> Coroutine[Any, Any, ExecutionResult]:
    """Execute a parsed document with batched resolvers, in a scope of its own.

    Other keyword arguments go to graphql-core's ``execute`` (``middleware=``,
    ``field_resolver=``, ...). As graphql-core's, the execution starts in this
    call (root resolvers run, hooks and abort signals are looked at); await the
    coroutine returned for the result.
    """
    result = gql.execute(
        schema,
        document,
        root_value,
        context_value,
        variable_values,
        operation_name,
        **_class_kwargs("execute", execution_context_class, kwargs),
        **kwargs,
    )
    return _result_of(result)


async def _result_of(result: Any) -> ExecutionResult:
    if _is_awaitable(result):
        return await result  # type: ignore[no-any-return]
    return result  # type: ignore[no-any-return]


def execute_sync(
    schema: GraphQLSchema,
    document: DocumentNode,
    root_value: Any = None,
    context_value: Any = None,
    variable_values: dict[str, Any] | None = None,
    operation_name: str | None = None,
    *,
    execution_context_class: type[Any] | None = None,
    **kwargs: Any,
) -> ExecutionResult:
    """Execute a parsed document from sync code (a Flask or Django view), batched.

    Runs an event loop of its own for the duration of the call; calling it while
    a loop runs in this thread is an error (``await execute(...)`` there).
    """
    class_kwargs = _class_kwargs("execute_sync", execution_context_class, kwargs)
    _no_running_loop("execute_sync")
    result = gql.execute(
        schema,
        document,
        root_value,
        context_value,
        variable_values,
        operation_name,
        **class_kwargs,
        **kwargs,
    )
    return result  # type: ignore[return-value]


def _no_running_loop(where: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise batchy.UsageError(
        f"{where}() was called while an event loop is running in this thread; it runs a "
        f"loop of its own. In async code, use 'await batchy_contrib.graphql."
        f"{where.removesuffix('_sync')}(...)' instead."
    )


async def graphql(
    schema: GraphQLSchema,
    source: Any,
    root_value: Any = None,
    context_value: Any = None,
    variable_values: dict[str, Any] | None = None,
    operation_name: str | None = None,
    *,
    execution_context_class: type[Any] | None = None,
    **kwargs: Any,
) -> ExecutionResult:
    """Parse, validate and execute ``source`` (like ``graphql.graphql``), batched.

    It is graphql-core's own ``graphql`` with our execution context class: every
    parse, validation and execution option of the installed graphql-core is
    taken as graphql-core takes it, and any other is a ``TypeError`` as there.
    """
    class_kwargs = _class_kwargs("graphql", execution_context_class, kwargs)
    return await gql.graphql(
        schema,
        source,
        root_value,
        context_value,
        variable_values,
        operation_name,
        **class_kwargs,
        **kwargs,
    )


def graphql_sync(
    schema: GraphQLSchema,
    source: Any,
    root_value: Any = None,
    context_value: Any = None,
    variable_values: dict[str, Any] | None = None,
    operation_name: str | None = None,
    *,
    execution_context_class: type[Any] | None = None,
    **kwargs: Any,
) -> ExecutionResult:
    """Parse, validate and execute ``source`` from sync code (like ``graphql_sync``), batched.

    graphql-core's own ``graphql_sync`` with our execution context class (its
    options, ``check_sync=`` included, are taken as there); pending values are
    waited for on a loop of our own, so the result is there when it returns.
    """
    class_kwargs = _class_kwargs("graphql_sync", execution_context_class, kwargs)
    _no_running_loop("graphql_sync")
    return gql.graphql_sync(
        schema,
        source,
        root_value,
        context_value,
        variable_values,
        operation_name,
        **class_kwargs,
        **kwargs,
    )
