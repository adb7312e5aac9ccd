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
6. **Limits in one argument.** Every entry point takes ``limits=`` (a
   :class:`~batchy_contrib.graphql.limits.Limits`): ``graphql()`` and
   ``graphql_sync()`` add its validation rules, and the planned executor stops
   at its ``max_objects`` and ``time_budget``.

The class lives in ``_graphql_context``, the entry points here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[graphql]'", "graphql"):
    import graphql as gql
    from graphql import DocumentNode, ExecutionResult, GraphQLSchema

import batchy

from ._context import (
    GRAPHQL_CORE_33,
    LIMITS,
    BatchyExecutionContext,
    BatchyMixin,
    is_awaitable,
    resolve_handlers,
    with_batchy,
)
from .limits import Limits

__all__ = [
    "BatchyExecutionContext",
    "BatchyMixin",
    "GRAPHQL_CORE_33",
    "Limits",
    "execute",
    "execute_sync",
    "graphql",
    "graphql_sync",
    "resolve_handlers",
    "with_batchy",
]


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
    limits: Limits | None = None,
    **kwargs: Any,
) -> Coroutine[Any, Any, ExecutionResult]:
    """Execute a parsed document with batched resolvers, in a scope of its own.

    Other keyword arguments go to graphql-core's ``execute`` (``middleware=``,
    ``field_resolver=``, ...). As graphql-core's, the execution starts in this
    call (root resolvers run, hooks and abort signals are looked at); await the
    coroutine returned for the result. ``limits``: the execution stops at its
    ``max_objects`` and ``time_budget`` (the document is not validated here).
    """
    class_kwargs = _class_kwargs("execute", execution_context_class, kwargs)
    with _limits(limits):
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
    return _result_of(result)


async def _result_of(result: Any) -> ExecutionResult:
    if is_awaitable(result):
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
    limits: Limits | None = None,
    **kwargs: Any,
) -> ExecutionResult:
    """Execute a parsed document from sync code (a Flask or Django view), batched.

    Runs an event loop of its own for the duration of the call; calling it while
    a loop runs in this thread is an error (``await execute(...)`` there).
    ``limits``: as for :func:`execute`.
    """
    class_kwargs = _class_kwargs("execute_sync", execution_context_class, kwargs)
    _no_running_loop("execute_sync")
    with _limits(limits):
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
    limits: Limits | None = None,
    **kwargs: Any,
) -> ExecutionResult:
    """Parse, validate and execute ``source`` (like ``graphql.graphql``), batched.

    It is graphql-core's own ``graphql`` with our execution context class: every
    parse, validation and execution option of the installed graphql-core is
    taken as graphql-core takes it, and any other is a ``TypeError`` as there.
    ``limits``: its rules join validation (``rules=``, or graphql-core's
    specified rules), and the execution stops at its ``max_objects`` and
    ``time_budget``.
    """
    class_kwargs = _class_kwargs("graphql", execution_context_class, kwargs)
    refused = _add_rules(schema, source, limits, kwargs)
    if refused is not None:
        return refused
    with _limits(limits):
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
    limits: Limits | None = None,
    **kwargs: Any,
) -> ExecutionResult:
    """Parse, validate and execute ``source`` from sync code (like ``graphql_sync``), batched.

    graphql-core's own ``graphql_sync`` with our execution context class (its
    options, ``check_sync=`` included, are taken as there); pending values are
    waited for on a loop of our own, so the result is there when it returns.
    ``limits``: as for :func:`graphql`.
    """
    class_kwargs = _class_kwargs("graphql_sync", execution_context_class, kwargs)
    _no_running_loop("graphql_sync")
    refused = _add_rules(schema, source, limits, kwargs)
    if refused is not None:
        return refused
    with _limits(limits):
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


def _add_rules(
    schema: GraphQLSchema, source: Any, limits: Limits | None, kwargs: dict[str, Any]
) -> ExecutionResult | None:
    """Add the rules of ``limits`` to validation; on 3.2, the result if validation fails."""
    if limits is None:
        return None
    if GRAPHQL_CORE_33:
        rules = kwargs.get("rules")
        kwargs["rules"] = [*(gql.specified_rules if rules is None else rules), *limits.rules()]
        return None
    # graphql-core 3.2's graphql() takes no rules: validate here, with its rules
    # and ours; a valid query is parsed and validated again by graphql-core (the
    # price of passing every other option through unchanged).
    if gql.validate_schema(schema):
        return None  # graphql-core reports it
    try:
        document = gql.parse(source)
    except gql.GraphQLError:
        return None  # graphql-core reports it
    extra = {"hide_suggestions": True} if kwargs.get("hide_suggestions") else {}
    errors = gql.validate(schema, document, [*gql.specified_rules, *limits.rules()], **extra)
    return ExecutionResult(data=None, errors=errors) if errors else None


@contextmanager
def _limits(limits: Limits | None) -> Iterator[None]:
    # The execution context graphql-core builds inside this block takes them.
    if limits is None:
        yield
        return
    if not isinstance(limits, Limits):
        raise batchy.UsageError(
            f"limits= takes a batchy_contrib.graphql.limits.Limits, got {limits!r}; "
            "e.g. limits=Limits.public() or Limits(max_objects=10_000, time_budget=2.0)"
        )
    token = LIMITS.set(limits)
    try:
        yield
    finally:
        LIMITS.reset(token)
