"""The planned executor: positions go on as their values arrive, plans are made once, errors drop below nulls."""

from __future__ import annotations

import asyncio
from typing import Any

import graphql as gql
import pytest

import batchy
from batchy.testing import record
from batchy_contrib import graphql as bgql

SDL = """
type Query { slow: Item, fast: Item, items(n: Int = 3): [Item!] }
type Item { id: Int!, child: Item, label(prefix: String = "#"): String! }
"""


def make_schema(events: list[str]) -> gql.GraphQLSchema:
    @batchy.batched
    async def slow_items(ids: list[int]) -> list[Any]:
        events.append(f"slow {ids}")
        await asyncio.sleep(0.05)
        events.append("slow done")
        return [{"id": i} for i in ids]

    @batchy.batched
    async def items(ids: list[int]) -> list[Any]:
        events.append(f"items {ids}")
        return [{"id": i} for i in ids]

    schema = gql.build_schema(SDL)
    query = schema.query_type
    item = schema.get_type("Item")
    assert query is not None and isinstance(item, gql.GraphQLObjectType)
    query.fields["slow"].resolve = lambda root, info: slow_items(1)
    query.fields["fast"].resolve = lambda root, info: items(2)
    query.fields["items"].resolve = lambda root, info, n: [items(i) for i in range(10, 10 + n)]
    item.fields["child"].resolve = lambda obj, info: items(obj["id"] * 10)
    item.fields["label"].resolve = lambda obj, info, prefix: f"{prefix}{obj['id']}"
    return schema


def test_a_slow_loader_holds_back_only_the_positions_waiting_for_it() -> None:
    events: list[str] = []
    schema = make_schema(events)
    result = bgql.graphql_sync(schema, "{ slow { child { id } } fast { child { id } } }")
    assert result.errors is None
    assert result.data == {"slow": {"child": {"id": 10}}, "fast": {"child": {"id": 20}}}
    # fast's child is loaded while the slow batch is still running.
    assert events == ["slow [1]", "items [2]", "items [20]", "slow done", "items [10]"]


@pytest.mark.parametrize("sync", [False, True])
def test_every_item_of_a_level_meets_in_one_batch(sync: bool) -> None:
    events: list[str] = []
    schema = make_schema(events)
    query = '{ items(n: 4) { id label(prefix: "i") child { id label } } }'
    with record() as rec:
        result = (
            bgql.graphql_sync(schema, query) if sync else asyncio.run(bgql.graphql(schema, query))
        )
    assert result.errors is None
    assert result.data == {
        "items": [
            {"id": i, "label": f"i{i}", "child": {"id": i * 10, "label": f"#{i * 10}"}}
            for i in range(10, 14)
        ]
    }
    assert events == ["items [10, 11, 12, 13]", "items [100, 110, 120, 130]"]
    assert rec.rounds == 2


def test_resolvers_see_the_infos_graphql_core_would_give() -> None:
    seen: list[tuple[str, list[Any], str, Any]] = []
    schema = gql.build_schema(SDL)
    item = schema.get_type("Item")
    assert isinstance(item, gql.GraphQLObjectType)

    def label(obj: Any, info: Any, prefix: str) -> str:
        seen.append((info.field_name, info.path.as_list(), info.parent_type.name, info.context))
        return prefix

    item.fields["label"].resolve = label
    root = {"items": [{"id": 1}, {"id": 2, "child": {"id": 3}}]}
    query = '{ items { label first: label(prefix: "x") child { label } } }'
    result = bgql.graphql_sync(schema, query, root_value=root, context_value="ctx")
    assert result.errors is None
    assert seen == [
        ("label", ["items", 0, "label"], "Item", "ctx"),
        ("label", ["items", 0, "first"], "Item", "ctx"),
        ("label", ["items", 1, "label"], "Item", "ctx"),
        ("label", ["items", 1, "first"], "Item", "ctx"),
        ("label", ["items", 1, "child", "label"], "Item", "ctx"),
    ]


def test_a_class_that_builds_its_own_infos_is_asked_for_each() -> None:
    base = bgql.BatchyExecutionContext

    class Tagged(base):  # type: ignore[misc,valid-type]
        def build_resolve_info(self, *args: Any) -> Any:
            info = super().build_resolve_info(*args)
            return info._replace(context={"tag": "custom"})

    schema = gql.build_schema("type Query { tag: String }")
    schema.query_type.fields["tag"].resolve = lambda root, info: info.context["tag"]  # type: ignore[union-attr]
    document = gql.parse("{ tag }")
    result = bgql.execute_sync(schema, document, execution_context_class=Tagged)
    assert result.data == {"tag": "custom"}


def test_errors_below_a_nulled_position_are_dropped() -> None:
    # item 0's id fails (non-null) at once, nulling the item; its child is still
    # loading then, and fails later: that error is below a null and not reported.
    schema = gql.build_schema(SDL)
    fields = schema.query_type.fields  # type: ignore[union-attr]
    item = schema.get_type("Item")
    assert isinstance(item, gql.GraphQLObjectType)

    @batchy.batched
    def children(ids: list[int]) -> list[Any]:
        return [ValueError(f"no child {i}") for i in ids]

    def item_id(obj: Any, info: Any) -> Any:
        if obj["id"] == 0:
            raise ValueError("bad id 0")
        return obj["id"]

    fields["items"].resolve = lambda root, info, n: [{"id": 0}, {"id": 1}]
    item.fields["child"].resolve = lambda obj, info: children(obj["id"])
    item.fields["id"].resolve = item_id
    result = bgql.graphql_sync(schema, "{ items { child { id } id } }")
    assert result.data == {"items": None}  # [Item!]: a null item nulls the list
    assert [(e.message, e.path) for e in result.errors or []] == [("bad id 0", ["items", 0, "id"])]


def test_a_failing_pending_field_nulls_an_object_completed_long_before() -> None:
    schema = gql.build_schema(
        """
        type Query { a: A }
        type A { b: B!, other: Int }
        type B { c: Int! }
        """
    )

    @batchy.batched
    def load(keys: list[str]) -> list[Any]:
        return [ValueError("c failed") if k == "c" else {} for k in keys]

    query = schema.query_type
    a_type, b_type = schema.get_type("A"), schema.get_type("B")
    assert query is not None
    assert isinstance(a_type, gql.GraphQLObjectType) and isinstance(b_type, gql.GraphQLObjectType)
    query.fields["a"].resolve = lambda root, info: {"other": 1}
    a_type.fields["b"].resolve = lambda obj, info: load("b")
    b_type.fields["c"].resolve = lambda obj, info: load("c")
    result = bgql.graphql_sync(schema, "{ a { other b { c } } }")
    # c is non-null, so is b: the error travels up to a, the first nullable position.
    assert result.data == {"a": None}
    assert [(e.message, e.path) for e in result.errors or []] == [("c failed", ["a", "b", "c"])]


def test_the_planned_executor_can_be_turned_off() -> None:
    class Plain(bgql.BatchyExecutionContext):  # type: ignore[misc,valid-type]
        batchy_fast_path = False

    events: list[str] = []
    schema = make_schema(events)
    document = gql.parse("{ items(n: 2) { id child { id } } }")
    result = bgql.execute_sync(schema, document, execution_context_class=Plain)
    assert result.errors is None
    assert result.data == {
        "items": [{"id": 10, "child": {"id": 100}}, {"id": 11, "child": {"id": 110}}]
    }
    assert events == ["items [10, 11]", "items [100, 110]"]


@pytest.mark.parametrize("sync", [False, True])
def test_a_failed_argument_coercion_is_a_new_error_at_every_position(sync: bool) -> None:
    # Like graphql-core: one error per object, each its own (a shared one would
    # collect every position's traceback).
    schema = gql.build_schema(
        "type Query { items: [Item!]! } type Item { id: Int!, tag(p: String!): String }"
    )
    schema.query_type.fields["items"].resolve = lambda root, info: [{"id": i} for i in range(3)]  # type: ignore[union-attr]
    document = gql.parse('query ($p: String = "x") { items { id tag(p: $p) } }')
    args: dict[str, Any] = {"variable_values": {"p": None}}
    if sync:
        result = bgql.execute_sync(schema, document, **args)
    else:
        result = asyncio.run(bgql.execute(schema, document, **args))
    assert result.data == {"items": [{"id": i, "tag": None} for i in range(3)]}
    assert result.errors is not None
    reference = gql.execute_sync(schema, document, **args)  # the message differs by line
    assert reference.errors is not None and len(reference.errors) == 3
    assert [(e.message, e.path) for e in result.errors] == [
        (reference.errors[0].message, ["items", i, "tag"]) for i in range(3)
    ]
    assert len({id(e.original_error or e) for e in result.errors}) == 3


LIST_ARG_SDL = """
type Query { byTags(tags: [String!]!): String, byId(id: Int!): String, other(id: Int!): String }
"""


def list_arg_schema(calls: list[tuple[str, list[Any]]]) -> gql.GraphQLSchema:
    def loader(name: str) -> batchy.Loader[Any, str]:
        @batchy.batched(name=name)
        async def load(keys: list[Any]) -> list[str]:
            calls.append((name, keys))
            await asyncio.sleep(0.01)
            return [f"{name} {k}" for k in keys]

        return load

    by_key, other = loader("by_key"), loader("other")
    schema = gql.build_schema(LIST_ARG_SDL)
    query = schema.query_type
    assert query is not None
    # The mistake: a list argument passed to a loader as one key (unhashable).
    query.fields["byTags"].resolve = lambda root, info, tags: by_key(tags)
    query.fields["byId"].resolve = lambda root, info, id: by_key(id)
    query.fields["other"].resolve = lambda root, info, id: other(id)
    return schema


async def test_a_resolver_passing_a_list_to_a_loader_fails_only_its_field() -> None:
    calls: list[tuple[str, list[Any]]] = []
    schema = list_arg_schema(calls)
    bad, good, mixed = await asyncio.wait_for(
        asyncio.gather(
            bgql.graphql(schema, '{ byTags(tags: ["a", "b"]) }'),
            bgql.graphql(schema, "{ other(id: 2) }"),
            bgql.graphql(schema, '{ byTags(tags: ["c"]) byId(id: 1) }'),
        ),
        timeout=5,  # before the fix, every request hung here
    )
    assert bad.data == {"byTags": None}
    assert bad.errors is not None and len(bad.errors) == 1
    message = bad.errors[0].message
    assert "by_key" in message and "['a', 'b'] (list)" in message and "cannot be hashed" in message
    assert "key=tuple" in message
    assert bad.errors[0].path == ["byTags"]
    assert good.errors is None and good.data == {"other": "other 2"}
    assert mixed.data == {"byTags": None, "byId": "by_key 1"}
    assert sorted(calls) == [("by_key", [1]), ("other", [2])]  # one call each, one round


# -- async def resolvers run at once (up to their first wait) -------------------------


@pytest.mark.parametrize("shape", ["subclass", "nested"])
def test_coroutines_a_failed_list_never_reached_are_closed(shape: str) -> None:
    import gc
    import warnings

    class Items(list[Any]):
        pass

    async def good() -> str:
        return "x"

    async def bad() -> str:
        raise ValueError("bad item")

    async def node(root: Any, info: Any) -> Any:
        return {}  # its fields are resolved in the handler, where async resolvers run at once

    schema = gql.build_schema(
        "type Query { node: Node } type Node { items: [String!], nested: [[String!]!] }"
    )
    schema.query_type.fields["node"].resolve = node  # type: ignore[union-attr]
    fields = schema.get_type("Node").fields  # type: ignore[union-attr]
    fields["items"].resolve = lambda source, info: Items([bad(), good(), good()])
    fields["nested"].resolve = lambda source, info: [[bad(), good()], [good()]]
    query = gql.parse("{ node { items } }" if shape == "subclass" else "{ node { nested } }")
    # Earlier tests' garbage is collected first: coroutines they left unawaited warn as
    # they go, and a collection inside the block below counted them as this query's.
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = bgql.execute_sync(schema, query)
        del result
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


def test_a_deep_query_of_async_resolvers_is_not_cut_short_by_running_them_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Deep down, async resolvers are stepped by the scheduler again, from the
    # handler's own stack: the depth a query can reach does not shrink.
    import sys

    import graphql.language.parser

    monkeypatch.setattr(graphql.language.parser, "MAX_NESTING_DEPTH", 10**6, raising=False)

    schema = gql.build_schema("type Query { node: Node } type Node { child: Node, v: String }")

    async def node(source: Any, info: Any) -> Any:
        return {"v": "leaf"}

    schema.query_type.fields["node"].resolve = node  # type: ignore[union-attr]
    schema.get_type("Node").fields["child"].resolve = node  # type: ignore[union-attr]
    depth = sys.getrecursionlimit() // 2
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit * 10)  # the parser's own recursion, not the executor's
    try:
        document = gql.parse("{ node { " + "child { " * depth + "v" + " }" * depth + " } }")
    finally:
        sys.setrecursionlimit(limit)
    result = bgql.execute_sync(schema, document)
    assert result.errors is None
    data = result.data["node"]  # type: ignore[index]
    for _ in range(depth):
        data = data["child"]
    assert data == {"v": "leaf"}
