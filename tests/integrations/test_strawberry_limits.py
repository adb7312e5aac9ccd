"""Strawberry with batchy's limits: one argument, checked before and during execution."""

from __future__ import annotations

import asyncio

import pytest

strawberry = pytest.importorskip("strawberry", reason="strawberry needs graphql-core 3.3")

import batchy  # noqa: E402
from batchy_contrib.graphql.limits import Limits  # noqa: E402
from batchy_contrib.graphql.strawberry import schema_options  # noqa: E402


@strawberry.type
class Node:
    id: int

    @strawberry.field
    def child(self) -> Node:
        return Node(id=self.id + 1)


@strawberry.type
class Query:
    @strawberry.field
    def root(self) -> Node:
        return Node(id=0)

    @strawberry.field
    async def slow(self) -> int:
        await asyncio.sleep(5)
        return 1


def test_validation_limits_refuse_a_deep_query_before_it_runs() -> None:
    schema = strawberry.Schema(Query, **schema_options(Limits(max_depth=3)))
    result = schema.execute_sync("{ root { child { child { child { id } } } } }")
    assert result.data is None
    assert result.errors is not None
    assert "over the limit max_depth=3: it measures 5" in result.errors[0].message


async def test_the_time_budget_ends_a_slow_request() -> None:
    schema = strawberry.Schema(Query, **schema_options(Limits(time_budget=0.2)))
    result = await asyncio.wait_for(schema.execute("{ slow }"), 3)
    assert result.data is None
    assert result.errors is not None
    assert "time_budget" in result.errors[-1].message


def test_limits_must_be_limits() -> None:
    with pytest.raises(
        batchy.UsageError, match=r"expected a batchy_contrib\.graphql\.limits\.Limits"
    ):
        schema_options({"max_depth": 3})  # type: ignore[arg-type]
