"""The strawberry helpers: the class to pass, and an extension that refuses a schema not on batchy."""

from __future__ import annotations

from typing import Any

import pytest

strawberry = pytest.importorskip("strawberry", reason="strawberry needs graphql-core 3.3")

import batchy  # noqa: E402
from batchy_contrib.graphql.strawberry import (  # noqa: E402
    BatchyExtension,
    NotBatchedError,
    execution_context_class,
)
from batchy_contrib.web.request_stats import track  # noqa: E402


@batchy.batched
async def names(ids: list[int]) -> list[str]:
    return [f"user {i}" for i in ids]


@strawberry.type
class Query:
    @strawberry.field
    async def names(self) -> list[str]:
        return list(await batchy.gather(*(names(i) for i in range(3))))


def test_sync_execution_batches_and_reports_stats() -> None:
    schema = strawberry.Schema(
        Query, execution_context_class=execution_context_class, extensions=[BatchyExtension]
    )
    with track("test"):
        result = schema.execute_sync("{ names }")
    assert result.errors is None
    assert result.data == {"names": ["user 0", "user 1", "user 2"]}
    assert result.extensions == {"batchy": {"rounds": 1, "calls": {"names": 1}}}


def test_outside_a_request_there_are_no_stats() -> None:
    schema = strawberry.Schema(
        Query, execution_context_class=execution_context_class, extensions=[BatchyExtension]
    )
    assert schema.execute_sync("{ names }").extensions == {}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_schema_not_on_batchy_is_refused_by_name(mode: str) -> None:
    schema = strawberry.Schema(Query, extensions=[BatchyExtension])
    if mode == "sync":
        result: Any = schema.execute_sync("{ names }")
    else:
        import asyncio

        result = asyncio.run(schema.execute("{ names }"))
    assert result.data is None
    [error] = result.errors
    assert isinstance(error.original_error, NotBatchedError)
    assert (
        "execution_context_class=batchy_contrib.graphql.strawberry.execution_context_class"
        in str(error)
    )
    assert "StrawberryGraphQLCoreExecutionContext, which does not run on batchy" in str(error)
    assert "There is no current event loop" not in str(error)
