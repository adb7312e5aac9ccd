"""Query limits for public endpoints: hostile queries are refused before anything runs."""

from __future__ import annotations

import time

import pytest
from graphql import build_schema, parse, specified_rules, validate

from batchy_contrib.graphql_limits import Limits

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
