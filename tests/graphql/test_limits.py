"""Query limits for public endpoints: hostile queries are refused before anything runs."""

from __future__ import annotations

import time

import pytest
from graphql import build_schema, get_introspection_query, parse, specified_rules, validate

from batchy_contrib.graphql.limits import Limits

SCHEMA = build_schema(
    """
    type Query { posts(first: Int): [Post!]!  user(id: ID!): User  node: Node }
    interface Node { id: ID! }
    type Post implements Node { id: ID!  title: String  author: User  comments(first: Int): [Comment!]! }
    type User implements Node { id: ID!  name: String  posts(limit: Int): [Post!]! }
    type Comment { text: String  author: User }
    """
)


def check(query: str, limits: Limits) -> list[str]:
    errors = validate(SCHEMA, parse(query), [*specified_rules, *limits.rules()])
    return [e.message for e in errors]


def doubling(levels: int) -> str:
    """The 'billion laughs' of GraphQL: each fragment spreads the previous one twice."""
    fragments = ["fragment F0 on Post { id title }"]
    for i in range(1, levels + 1):
        fragments.append(f"fragment F{i} on Post {{ ...F{i - 1} author {{ name }} ...F{i - 1} }}")
    return f"query Feed {{ posts {{ ...F{levels} }} }}\n" + "\n".join(fragments)


def test_doubling_fragments_are_measured_expanded_and_refused_at_once() -> None:
    query = doubling(20)
    assert len(query) < 2_000
    start = time.perf_counter()
    messages = check(query, Limits.public())
    assert time.perf_counter() - start < 2.0
    fields = [m for m in messages if "max_fields" in m]
    # F0 has 2 fields and F(i) = 2 F(i-1) + 2 (author { name }): F20 = 2^22 - 2, plus posts.
    assert fields == [
        "Feed is over the limit max_fields=2000: it measures 4,194,303 (fields with every "
        "fragment expanded). Ask for less in one query (fewer or smaller lists, fewer "
        "fragment spreads), or raise the limit on the server."
    ]


def test_depth() -> None:
    query = (
        "{ user(id: 1) { posts { author { posts { author { posts { author { name } } } } } } } }"
    )
    assert check(query, Limits(max_depth=7)) == [
        "the anonymous operation is over the limit max_depth=7: it measures 8 (nested "
        "fields). Ask for less in one query (fewer or smaller lists, fewer fragment "
        "spreads), or raise the limit on the server."
    ]
    assert check(query, Limits(max_depth=8)) == []


def test_aliases_count_once_per_expansion() -> None:
    aliases = " ".join(f"a{i}: title" for i in range(10))
    query = f"query Q {{ posts {{ ...A ...A }} }} fragment A on Post {{ {aliases} }}"
    assert [m for m in check(query, Limits(max_aliases=19)) if "max_aliases" in m] == [
        "Q is over the limit max_aliases=19: it measures 20 (aliased fields with every "
        "fragment expanded). Ask for less in one query (fewer or smaller lists, fewer "
        "fragment spreads), or raise the limit on the server."
    ]
    assert check(query, Limits(max_aliases=20)) == []


def test_cost_multiplies_lists_by_their_size_argument_or_the_default() -> None:
    query = "{ posts(first: 100) { title comments(first: 50) { text } } }"
    # posts 1 + 100 * (title 1 + comments (1 + 50 * text 1)) = 5,201
    assert check(query, Limits(max_cost=5_201)) == []
    assert "it measures 5,201 (estimated cost" in check(query, Limits(max_cost=5_200))[0]
    # Without a literal size a list counts default_list_size items.
    assert check("{ posts { title } }", Limits(max_cost=20, default_list_size=20)) == [
        "the anonymous operation is over the limit max_cost=20: it measures 21 (estimated "
        "cost, lists counted at their size). Ask for less in one query (fewer or smaller "
        "lists, fewer fragment spreads), or raise the limit on the server."
    ]
    # A field can be priced on its own.
    priced = Limits(max_cost=1_000, costs={"Post.comments": 100})
    assert check("{ posts(first: 5) { comments(first: 1) { text } } }", priced) == []
    assert check("{ posts(first: 10) { comments(first: 1) { text } } }", priced) != []


def test_fragments_on_interfaces_and_inline_fragments_use_the_conditions_type() -> None:
    query = "{ node { id ... on User { posts(limit: 3) { title } } ...P } } fragment P on Post { comments(first: 4) { text } }"
    # node 1 + id 1 + posts (1 + 3) + comments (1 + 4) = 11
    assert check(query, Limits(max_cost=11)) == []
    assert check(query, Limits(max_cost=10)) != []


def test_introspection_fields_count_their_lists_like_any_field() -> None:
    # __schema 1 + types (1 + 20 * (fields (1 + 20 * (name 1 + type (1 + name 1))))) = 1,222
    query = "{ __schema { types { fields { name type { name } } } } }"
    assert check(query, Limits(max_cost=1_222)) == []
    assert "it measures 1,222 (estimated cost" in check(query, Limits(max_cost=1_221))[0]
    # __type 1 + fields (1 + 20 * name 1) = 22; __typename costs 1 wherever it is.
    query = '{ __type(name: "Post") { fields { name } } posts(first: 2) { __typename } }'
    assert "it measures 25 (estimated cost" in check(query, Limits(max_cost=24))[0]


def test_the_full_introspection_query_needs_the_documented_settings() -> None:
    query = get_introspection_query()
    assert [m.split(":")[0] for m in check(query, Limits.public())] == [
        "IntrospectionQuery is over the limit max_depth=12",
        "IntrospectionQuery is over the limit max_cost=100000",
    ]
    assert check(query, Limits.public(max_depth=15, max_cost=400_000)) == []
    assert check(query, Limits.internal()) == []


def test_a_fragment_cycle_is_left_to_graphql_cores_own_rule() -> None:
    query = "{ posts { ...A } } fragment A on Post { ...B } fragment B on Post { ...A }"
    messages = check(query, Limits.public())
    assert any("Cannot spread fragment 'A' within itself" in m for m in messages)


def test_presets() -> None:
    assert Limits.public().max_depth == 12
    assert Limits.public(max_depth=5).max_depth == 5
    assert Limits.internal().max_cost == 5_000_000
    assert check("{ posts(first: 10) { title author { name } } }", Limits.public()) == []


@pytest.mark.parametrize("limit", ["max_depth", "max_fields", "max_aliases", "max_cost"])
def test_none_switches_a_limit_off(limit: str) -> None:
    tiny = Limits(**{"max_depth": 1, "max_fields": 1, "max_aliases": 0, "max_cost": 1, limit: None})
    messages = check("{ posts { a: title author { name } } }", tiny)
    assert len(messages) == 3
    assert not any(limit + "=" in m for m in messages)


# -- run-time limits: max_objects and time_budget, enforced by batchy's executor --------

import asyncio  # noqa: E402
import tracemalloc  # noqa: E402
from typing import Any  # noqa: E402

from graphql import ExecutionResult, GraphQLSchema  # noqa: E402

import batchy  # noqa: E402
from batchy_contrib import graphql as bgql  # noqa: E402

NODES_SDL = """
type Query { node: Node, slow: String, fast: String }
type Node { id: ID, next: Node, children: [Node] }
"""


def make_nodes(slow: Any = None) -> GraphQLSchema:
    schema = build_schema(NODES_SDL)
    query, node = schema.query_type, schema.get_type("Node")
    assert query is not None and node is not None
    query.fields["node"].resolve = lambda root, info: {"id": 1}
    query.fields["fast"].resolve = lambda root, info: "fast"
    node.fields["next"].resolve = lambda source, info: {"id": source["id"] + 1}  # type: ignore[union-attr]
    node.fields["children"].resolve = lambda source, info: [{"id": i} for i in range(100)]  # type: ignore[union-attr]
    if slow is not None:
        query.fields["slow"].resolve = slow
    return schema


def aliased_doubling(levels: int) -> str:
    """Each fragment selects the previous one under two aliases: 2^levels objects."""
    fragments = ["fragment F0 on Node { id }"]
    for i in range(1, levels + 1):
        fragments.append(
            f"fragment F{i} on Node {{ a: next {{ ...F{i - 1} }} b: next {{ ...F{i - 1} }} }}"
        )
    return f"{{ node {{ ...F{levels} }} }}\n" + "\n".join(fragments)


def limit_of(result: ExecutionResult) -> tuple[Any, Any, Any]:
    assert result.errors, result
    error = result.errors[-1]
    ext = error.extensions or {}
    return ext.get("limit"), ext.get("value"), error.message


def test_an_unvalidated_doubling_query_stops_at_max_objects_quickly_and_small() -> None:
    document = parse(aliased_doubling(40))  # 2^40 objects if nothing stopped it
    schema = make_nodes()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        result = bgql.execute_sync(schema, document, limits=Limits(max_objects=10_000))
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.data is None
    assert limit_of(result) == (
        "max_objects",
        10_001,
        "The request went over the limit max_objects=10000: it measured 10,001 objects "
        "completed when it was stopped, and returns no data. Ask for less in one query "
        "(fewer or smaller lists), or raise the limit on the server.",
    )
    assert elapsed < 2.0
    assert peak < 50_000_000


@pytest.mark.parametrize("style", ["plain", "future", "generator"])
def test_max_objects_counts_objects_completed_now_and_later(style: str) -> None:
    @batchy.batched
    def nexts(ids: list[int]) -> list[Any]:
        return [{"id": i + 1} for i in ids]

    def next_generator(source: Any, info: Any) -> Any:
        return (yield nexts(source["id"]))

    schema = make_nodes()
    node = schema.get_type("Node")
    if style == "future":
        node.fields["next"].resolve = lambda source, info: nexts(source["id"])  # type: ignore[union-attr]
    elif style == "generator":
        node.fields["next"].resolve = next_generator  # type: ignore[union-attr]
    # The data, node, then 2 + 4 + ... + 64: 128 objects.
    document = parse(aliased_doubling(6))
    fine = bgql.execute_sync(schema, document, limits=Limits(max_objects=128))
    assert fine.errors is None and fine.data is not None
    over = asyncio.run(bgql.execute(schema, document, limits=Limits(max_objects=127)))
    assert over.data is None
    assert limit_of(over)[:2] == ("max_objects", 128)


def _sleeper(cancelled: list[str]) -> Any:
    async def slow(root: Any, info: Any) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return "slow"  # pragma: no cover

    return slow


@pytest.mark.parametrize("entry", ["execute", "execute_sync", "graphql", "graphql_sync"])
def test_a_resolver_sleeping_past_the_time_budget_ends_the_request_at_the_budget(
    entry: str,
) -> None:
    cancelled: list[str] = []
    schema = make_nodes(_sleeper(cancelled))
    limits = Limits(time_budget=0.2)
    query = "{ fast slow }"
    started = time.perf_counter()
    if entry == "execute":
        result = asyncio.run(bgql.execute(schema, parse(query), limits=limits))
    elif entry == "execute_sync":
        result = bgql.execute_sync(schema, parse(query), limits=limits)
    elif entry == "graphql":
        result = asyncio.run(bgql.graphql(schema, query, limits=limits))
    else:
        result = bgql.graphql_sync(schema, query, limits=limits)
    elapsed = time.perf_counter() - started
    assert 0.2 <= elapsed < 1.5
    assert result.data is None
    limit, value, message = limit_of(result)
    assert limit == "time_budget" and 0.2 <= value < 1.5
    assert message.startswith("The request went over the limit time_budget=0.2: it measured 0.")
    assert cancelled == ["slow"]


def test_graphql_validates_with_the_limits_rules() -> None:
    result = bgql.graphql_sync(SCHEMA, doubling(20), limits=Limits.public())
    assert result.data is None
    assert result.errors is not None
    assert any("max_fields=2000: it measures 4,194,303" in e.message for e in result.errors)
    refused = asyncio.run(bgql.graphql(SCHEMA, doubling(20), limits=Limits.public()))
    assert refused.errors is not None
    assert [e.message for e in refused.errors] == [e.message for e in result.errors]


@pytest.mark.skipif(not bgql.GRAPHQL_CORE_33, reason="graphql-core 3.2's graphql() has no rules=")
def test_rules_given_by_the_caller_are_kept_and_the_limits_join_them() -> None:
    unchecked = bgql.graphql_sync(SCHEMA, "{ nope }", rules=[], limits=Limits.public())
    assert unchecked.errors is None
    limited = bgql.graphql_sync(SCHEMA, doubling(3), rules=[], limits=Limits(max_fields=3))
    assert limited.errors is not None and "max_fields=3" in limited.errors[0].message


def test_within_the_limits_nothing_changes() -> None:
    schema = make_nodes()
    document = parse(aliased_doubling(3))
    plain = bgql.execute_sync(schema, document)
    limited = bgql.execute_sync(schema, document, limits=Limits.internal())
    assert limited.errors is None and limited.data == plain.data


def test_with_batchy_takes_limits_for_every_execution_of_the_class() -> None:
    import graphql as gql

    base = bgql.BatchyExecutionContext
    limited = bgql.with_batchy(base, limits=Limits(max_objects=4))
    assert limited.batchy_limits == Limits(max_objects=4)
    assert base.batchy_limits is None
    name = "executor_class" if bgql.GRAPHQL_CORE_33 else "execution_context_class"
    result = gql.execute_sync(make_nodes(), parse(aliased_doubling(3)), **{name: limited})
    assert result.data is None
    assert limit_of(result)[:2] == ("max_objects", 5)


def test_limits_must_be_a_limits() -> None:
    with pytest.raises(batchy.UsageError, match=r"limits= takes a batchy_contrib"):
        bgql.execute_sync(make_nodes(), parse("{ fast }"), limits={"max_objects": 3})  # type: ignore[arg-type]


# The guide (docs/guides/30-graphql.rst, "Limits") includes the test below between
# its markers: what it shows is what runs here.


def test_the_guides_endpoint_settings() -> None:
    schema = make_nodes()
    # [limits-example-start]
    from batchy_contrib.graphql import graphql_sync
    from batchy_contrib.graphql.limits import Limits

    PUBLIC = Limits.public()  # anyone may send a query
    INTERNAL = Limits.internal(time_budget=30.0)  # trusted clients, with one change

    def endpoint(query: str, trusted: bool) -> dict[str, Any]:
        result = graphql_sync(schema, query, limits=INTERNAL if trusted else PUBLIC)
        return result.formatted

    assert endpoint("{ node { id } }", trusted=False) == {"data": {"node": {"id": "1"}}}
    # 2^16 objects from 1 KB of fragments: refused by validation, nothing runs.
    refused = endpoint(aliased_doubling(16), trusted=False)
    assert refused["errors"][0]["extensions"] == {
        "code": "QUERY_LIMIT",
        "limit": "max_depth",
        "value": 18,
    }
    # Valid (its lists have no size argument: each counts 20), but 100 children
    # each make it 1,010,101 objects: stopped as it runs, with no data.
    wide = "{ node { children { children { children { id } } } } }"
    stopped = endpoint(wide, trusted=False)
    assert stopped["data"] is None
    assert stopped["errors"][0]["extensions"] == {
        "code": "QUERY_LIMIT",
        "limit": "max_objects",
        "value": 20_001,
    }
    # [limits-example-end]
