"""Strawberry on batchy: the execution context class to pass, and an extension that checks it.

::

    import strawberry
    from batchy_contrib.graphql.strawberry import BatchyExtension, execution_context_class

    schema = strawberry.Schema(
        query=Query,
        execution_context_class=execution_context_class,  # resolvers batch
        extensions=[BatchyExtension],                      # stats in "extensions"
    )
    # or, with limits for a public endpoint (graphql_limits.Limits):
    schema = strawberry.Schema(query=Query, **schema_options(Limits.public()))

:class:`BatchyExtension` puts the request's batching stats (rounds, calls per
loader) in the response's ``extensions["batchy"]`` when a web integration
tracks the request (:mod:`batchy_contrib.web.asgi`, :mod:`batchy_contrib.web.flask`, ...),
and it stops a schema built without batchy's class with an error that says so:
strawberry's sync execution would otherwise fail with asyncio's "There is no
current event loop" or its own "failed to complete synchronously".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._extras import extra

with extra(__name__, "strawberry-graphql", "strawberry"):
    from strawberry.extensions import AddValidationRules, SchemaExtension
    from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

import batchy

from ..web.request_stats import current_stats
from . import BatchyMixin, with_batchy
from .limits import Limits

__all__ = ["BatchyExtension", "NotBatchedError", "execution_context_class", "schema_options"]

#: Strawberry's own execution context class, running on batchy.
execution_context_class: type[Any] = with_batchy(StrawberryGraphQLCoreExecutionContext)


def schema_options(limits: Limits | None = None) -> dict[str, Any]:
    """``strawberry.Schema`` keyword arguments: batchy's class, its extension, and ``limits``.

    ``strawberry.Schema(query=Query, **schema_options(Limits.public()))``: the
    limits' validation rules run before execution, and their object cap and time
    budget during it. Add your own extensions to the returned list.
    """
    if limits is None:
        return {"execution_context_class": execution_context_class, "extensions": [BatchyExtension]}
    if not isinstance(limits, Limits):
        raise batchy.UsageError(
            f"schema_options(limits={limits!r}): expected a batchy_contrib.graphql.limits.Limits "
            "(e.g. Limits.public())"
        )
    rules: list[Any] = list(limits.rules())
    # A factory, not an instance: strawberry builds each extension per request.
    extensions: list[Any] = [BatchyExtension, lambda: AddValidationRules(rules)]
    return {
        "execution_context_class": with_batchy(
            StrawberryGraphQLCoreExecutionContext, limits=limits
        ),
        "extensions": extensions,
    }


class NotBatchedError(batchy.UsageError):
    """A strawberry schema with :class:`BatchyExtension` was built without batchy's class."""


class BatchyExtension(SchemaExtension):
    """Checks that the schema runs on batchy, and reports the request's stats in ``extensions``.

    Set ``report_stats = False`` in a subclass to only check.
    """

    report_stats = True

    def on_operation(self) -> Iterator[None]:
        schema = self.execution_context.schema
        cls = getattr(schema, "execution_context_class", None)
        if not (isinstance(cls, type) and issubclass(cls, BatchyMixin)):
            name = getattr(cls, "__name__", repr(cls))
            raise NotBatchedError(
                f"this strawberry schema executes with {name}, which does not run on batchy: "
                "its loaders would not batch, and sync execution (Flask, Django) would fail. "
                "Build it with strawberry.Schema(..., execution_context_class="
                "batchy_contrib.graphql.strawberry.execution_context_class)"
            )
        yield

    def get_results(self) -> dict[str, Any]:
        stats = current_stats()
        if not self.report_stats or stats is None:
            return {}
        return {"batchy": stats.as_dict()}
