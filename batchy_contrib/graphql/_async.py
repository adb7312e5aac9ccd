"""graphql-core's own async execution on batchy, for what the planned executor leaves to it.

Queries and mutations run on the planned executor (``graphql_executor.py``).
Incremental delivery (``@defer``/``@stream``), subscriptions, and execution
context classes that turn the planned executor off (``batchy_fast_path =
False``) run on graphql-core's async execution instead. There a resolver's
batchy future is awaited like any awaitable, and the mixin here only adds what
graphql-core cannot know: a generator returned by a resolver is a batchy handler
(graphql-core would read it as a list), stepped as a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from types import GeneratorType
from typing import Any, TypeVar

import batchy

__all__ = ["AsyncMixin", "run_generator", "start_in_scope"]

T = TypeVar("T")


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


def run_generator(gen: Generator[Any, Any, Any], field: str) -> batchy.Task[Any]:
    """The batchy task that runs ``gen``, a generator returned by the resolver of ``field``.

    ``field`` is ``"Type.field"``, for error messages.
    """
    return _run_generator(gen, field)


def is_handler(value: Any) -> bool:
    """True for a generator a resolver returned as a handler (generator expressions are lists)."""
    return type(value) is GeneratorType and value.gi_code.co_name != "<genexpr>"


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


class AsyncMixin:
    """``complete_value`` for graphql-core's async execution: generators become handlers."""

    _core_complete: Callable[..., Any]
    is_awaitable: Callable[[Any], bool]

    def complete_value(
        self, return_type: Any, nodes: Any, info: Any, path: Any, result: Any, *rest: Any
    ) -> Any:
        if is_handler(result):
            result = run_generator(result, f"{info.parent_type.name}.{info.field_name}")
        if isinstance(result, batchy.Future):
            return self._complete_later(result, (return_type, nodes, info, path, *rest))
        return self._core_complete(return_type, nodes, info, path, result, *rest)

    async def _complete_later(self, future: batchy.Future[Any], args: tuple[Any, ...]) -> Any:
        # graphql-core handles the errors of this coroutine as the field's.
        value = await future
        completed = self.complete_value(*args[:4], value, *args[4:])
        if self.is_awaitable(completed):
            completed = await completed
        return completed
