"""graphene-django's GraphQLView on batchy: loaders batch, queries run in the view's thread."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from graphene_django.views import GraphQLView

from batchy_contrib.graphql import BatchyExecutionContext
from batchy_contrib.web.django import run


class BatchedGraphQLView(GraphQLView):
    execution_context_class = BatchyExecutionContext

    def execute_graphql_request(self, *args: Any, **kwargs: Any) -> Any:
        # Execute on batchy_contrib.web.django.run's loop, so that the ORM loaders'
        # queries come back to this thread (its connection, its transaction).
        return run(_finish(super().execute_graphql_request, *args, **kwargs))


async def _finish(execute: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    result = execute(*args, **kwargs)  # on a running loop, the execution is still under way
    return await result if inspect.isawaitable(result) else result
