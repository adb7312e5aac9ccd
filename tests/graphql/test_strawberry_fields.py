"""Strawberry's basic fields on the planned executor: read in place, no resolve info, same answers.

A strawberry field with no resolver, permission or extension of its own returns
``getattr(source, python_name)``; the executor reads the attribute itself
instead of building a resolve info for a resolver that ignores it. Everything
else still goes through strawberry's resolver.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

strawberry = pytest.importorskip("strawberry", reason="strawberry needs graphql-core 3.3")

from strawberry.extensions import SchemaExtension  # noqa: E402
from strawberry.permission import BasePermission  # noqa: E402
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext  # noqa: E402

from batchy_contrib.graphql import with_batchy  # noqa: E402

ASKED: Counter[str] = Counter()  # permission checks, by field
RESOLVED: Counter[str] = Counter()  # what a schema extension's resolve hook saw


class Allow(BasePermission):
    message = "no"

    def has_permission(self, source: Any, info: Any, **kwargs: Any) -> bool:
        ASKED[info.field_name] += 1
        return True


@strawberry.type
class Item:
    id: int
    author_name: str  # authorName in the schema: read by its Python name
    note: str | None = None
    secret: str = strawberry.field(default="s", permission_classes=[Allow])

    @strawberry.field
    def shout(self) -> str:
        return self.author_name.upper()


@strawberry.type
class Query:
    @strawberry.field
    def items(self) -> list[Item]:
        return [Item(id=i, author_name=f"user {i}", note="n" if i % 2 else None) for i in (1, 2, 3)]

    @strawberry.field
    def broken(self) -> list[Item]:
        return [Item(id=1, author_name="a"), object()]  # type: ignore[list-item]


class Counting(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's class, counting the resolve infos built per field name."""

    built: Counter[str] = Counter()

    def build_resolve_info(self, field_def: Any, field_nodes: Any, *args: Any) -> Any:
        Counting.built[field_nodes[0].name.value] += 1
        return super().build_resolve_info(field_def, field_nodes, *args)


class SeeEveryField(SchemaExtension):
    def resolve(self, _next: Any, root: Any, info: Any, *args: Any, **kwargs: Any) -> Any:
        RESOLVED[info.field_name] += 1
        return _next(root, info, *args, **kwargs)


QUERY = "{ items { id authorName note secret shout } }"


def test_basic_fields_are_read_without_a_resolve_info() -> None:
    expected = strawberry.Schema(Query).execute_sync(QUERY).data
    Counting.built.clear()
    ASKED.clear()
    ours = strawberry.Schema(Query, execution_context_class=with_batchy(Counting))
    result = ours.execute_sync(QUERY)
    assert result.errors is None
    assert result.data == expected
    assert result.data["items"][0] == {
        "id": 1,
        "authorName": "user 1",
        "note": "n",
        "secret": "s",
        "shout": "USER 1",
    }
    # items, and per item the field with a resolver and the one with a permission:
    # the three basic fields (id, authorName, note) are read in place.
    assert Counting.built == {"items": 1, "shout": 3, "secret": 3}
    assert ASKED == {"secret": 3}  # the permission still runs, once per item


async def test_async_execution_reads_them_too() -> None:
    Counting.built.clear()
    ours = strawberry.Schema(Query, execution_context_class=with_batchy(Counting))
    result = await ours.execute(QUERY)
    assert result.errors is None
    assert result.data == (await strawberry.Schema(Query).execute(QUERY)).data
    assert set(Counting.built) == {"items", "shout", "secret"}


def test_a_schema_extension_that_resolves_still_sees_every_field() -> None:
    RESOLVED.clear()
    ours = strawberry.Schema(
        Query, execution_context_class=with_batchy(Counting), extensions=[SeeEveryField]
    )
    result = ours.execute_sync(QUERY)
    assert result.errors is None
    assert RESOLVED == {
        "items": 1,
        "id": 3,
        "authorName": 3,
        "note": 3,
        "secret": 3,
        "shout": 3,
    }


def test_a_missing_attribute_is_the_error_strawberry_reports() -> None:
    query = "{ broken { id } }"
    ours = strawberry.Schema(Query, execution_context_class=with_batchy(Counting))
    result = ours.execute_sync(query)
    theirs = strawberry.Schema(Query).execute_sync(query)
    assert result.data == theirs.data is None
    assert result.errors is not None and theirs.errors is not None
    assert [(e.message, e.path) for e in result.errors] == [
        (e.message, e.path) for e in theirs.errors
    ]
    assert "'object' object has no attribute 'id'" in result.errors[0].message
