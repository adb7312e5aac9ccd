"""batchy_contrib.graphql: entry points, framework plumbing, errors and their messages."""

from __future__ import annotations

import asyncio
from typing import Any

import graphql as gql
import pytest
from blog_data import SDL, users_by_id

import batchy
from batchy.testing import record
from batchy_contrib import graphql as bgql

SCHEMA_SDL = """
type Query {
  user(id: Int!): User
  strictUser(id: Int!): User!
  users(ids: [Int!]!): [User]
  tags: [String!]!
  broken: String
}
type User { id: Int!, name: String! }
"""


@batchy.batched
def names(ids: list[int]) -> list[Any]:
    return [ValueError(f"no user {i}") if i < 0 else {"id": i, "name": f"u{i}"} for i in ids]


def make_schema() -> gql.GraphQLSchema:
    schema = gql.build_schema(SCHEMA_SDL)
    fields = schema.query_type.fields  # type: ignore[union-attr]
    fields["user"].resolve = lambda root, info, id: names(id)
    fields["strictUser"].resolve = lambda root, info, id: names(id)
    fields["users"].resolve = lambda root, info, ids: [names(i) for i in ids]
    fields["tags"].resolve = lambda root, info: (t for t in ["a", "b"])  # a genexpr is a list

    def broken(root: Any, info: Any) -> Any:
        yield "not a future"

    fields["broken"].resolve = broken
    return schema


SCHEMA = make_schema()


def core_base() -> type:
    """graphql-core's own class under BatchyExecutionContext."""
    mro = bgql.BatchyExecutionContext.__mro__
    return next(c for c in mro if c.__module__.startswith("graphql."))


async def test_list_of_futures_is_one_batch() -> None:
    with record() as rec:
        result = await bgql.graphql(SCHEMA, "{ users(ids: [1, 2, 3]) { id } tags }")
    assert result.errors is None
    assert result.data == {"users": [{"id": 1}, {"id": 2}, {"id": 3}], "tags": ["a", "b"]}
    assert rec.calls(names) == [[1, 2, 3]]


@pytest.mark.parametrize("sync", [False, True])
def test_per_key_error_nulls_a_nullable_field(sync: bool) -> None:
    query = "{ a: user(id: 1) { name } b: user(id: -1) { name } }"
    if sync:
        result = bgql.graphql_sync(SCHEMA, query)
    else:
        result = asyncio.run(bgql.graphql(SCHEMA, query))
    assert result.data == {"a": {"name": "u1"}, "b": None}
    assert [e.message for e in result.errors or []] == ["no user -1"]
    assert result.errors[0].path == ["b"]  # type: ignore[index]


async def test_error_in_non_null_field_nulls_the_parent() -> None:
    result = await bgql.graphql(SCHEMA, "{ strictUser(id: -2) { name } }")
    assert result.data is None
    assert [e.message for e in result.errors or []] == ["no user -2"]


def test_generator_yielding_a_non_future_names_the_resolver() -> None:
    result = bgql.graphql_sync(SCHEMA, "{ broken }")
    assert result.data == {"broken": None}
    message = result.errors[0].message  # type: ignore[index]
    assert "resolver of Query.broken (make_schema.<locals>.broken() at " in message
    assert "test_graphql.py:" in message and "yielded 'not a future' (str)" in message
    assert "a handler may yield a batchy future" in message


def test_parse_and_validation_errors_are_results() -> None:
    assert bgql.graphql_sync(SCHEMA, "{ user(").errors is not None
    result = bgql.graphql_sync(SCHEMA, "{ nope }")
    assert result.data is None
    assert "Cannot query field 'nope'" in result.errors[0].message  # type: ignore[index]


async def test_execute_sync_inside_a_running_loop_is_an_error() -> None:
    document = gql.parse("{ tags }")
    with pytest.raises(batchy.UsageError) as info:
        bgql.execute_sync(SCHEMA, document)
    message = str(info.value)
    assert "execute_sync() was called while an event loop is running" in message
    assert "await batchy_contrib.graphql.execute(...)" in message
    with pytest.raises(batchy.UsageError, match=r"graphql_sync\(\) was called while"):
        bgql.graphql_sync(SCHEMA, "{ tags }")


def test_with_batchy_rejects_what_is_not_an_execution_context_class() -> None:
    with pytest.raises(batchy.UsageError) as info:
        bgql.with_batchy(dict)
    message = str(info.value)
    assert "with_batchy() takes a graphql-core execution context class" in message
    assert "<class 'dict'>" in message and "Pass the class itself" in message


def test_with_batchy_keeps_a_batchy_class_and_wraps_others() -> None:
    cls = bgql.BatchyExecutionContext
    assert bgql.with_batchy(cls) is cls
    base = core_base()
    sub = type("Custom", (base,), {})
    wrapped = bgql.with_batchy(sub)
    assert issubclass(wrapped, bgql.BatchyMixin) and issubclass(wrapped, sub)
    assert wrapped.__name__ == "BatchyCustom"


def test_entry_points_reject_a_class_not_on_batchy() -> None:
    base = core_base()
    with pytest.raises(batchy.UsageError) as info:
        bgql.graphql_sync(SCHEMA, "{ tags }", execution_context_class=base)
    message = str(info.value)
    assert "graphql_sync(execution_context_class=" in message
    assert f"with_batchy({base.__name__})" in message


def test_generators_work_under_other_middleware() -> None:
    seen: list[str] = []

    def spy(next_: Any, root: Any, info: Any, **args: Any) -> Any:
        result = next_(root, info, **args)
        seen.append(type(result).__name__)
        return result

    schema = gql.build_schema(SDL)

    def viewer(root: Any, info: Any) -> Any:
        return (yield users_by_id(1))

    schema.query_type.fields["viewer"].resolve = viewer  # type: ignore[union-attr]
    result = bgql.graphql_sync(schema, "{ viewer { id } }", middleware=[spy])
    assert result.data == {"viewer": {"id": "1"}}
    assert seen[0] == "generator"  # middlewares see what the resolver returned


async def test_plain_graphql_core_with_the_middleware() -> None:
    # Without our class: loader futures and async def work as they are, and the
    # middleware makes generator resolvers work too (batched, but slower).
    schema = gql.build_schema(SDL)

    def viewer(root: Any, info: Any) -> Any:
        return (yield users_by_id(1))

    schema.query_type.fields["viewer"].resolve = viewer  # type: ignore[union-attr]
    result = await gql.graphql(schema, "{ viewer { id } }", middleware=[bgql.resolve_handlers])
    assert result.data == {"viewer": {"id": "1"}}


MUTATION_SDL = """
type Query { ok: Boolean }
type Mutation { first: User, second: User! }
type User { id: Int!, name: String! }
"""


@pytest.mark.parametrize("sync", [False, True])
def test_mutations_run_serially_with_generator_resolvers(sync: bool) -> None:
    order: list[str] = []
    schema = gql.build_schema(MUTATION_SDL)
    fields = schema.mutation_type.fields  # type: ignore[union-attr]

    def first(root: Any, info: Any) -> Any:
        order.append("first starts")
        user = yield names(1)
        order.append("first ends")
        return user

    def second(root: Any, info: Any) -> Any:
        order.append("second starts")
        return (yield names(-5))

    fields["first"].resolve = first
    fields["second"].resolve = second
    query = "mutation { first { name } second { name } }"
    result = bgql.graphql_sync(schema, query) if sync else asyncio.run(bgql.graphql(schema, query))
    assert order == ["first starts", "first ends", "second starts"]
    assert result.data is None  # second is non-null and failed
    assert [e.message for e in result.errors or []] == ["no user -5"]


NESTED_SDL = """
type Query { posts: [Post] }
type Post { id: Int!, author: User!, tags: [String!] }
type User { id: Int!, name: String! }
"""


@pytest.mark.parametrize("style", ["future", "async"])
def test_non_null_error_nulls_the_nearest_nullable_position(style: str) -> None:
    # posts[1].author is non-null and fails: the post (a nullable list item)
    # becomes null, the other posts stay, one error is reported at its path.
    schema = gql.build_schema(NESTED_SDL)
    fields = schema.query_type.fields  # type: ignore[union-attr]
    fields["posts"].resolve = lambda root, info: [{"id": 1}, {"id": -1}, {"id": 2}]
    post = schema.get_type("Post")
    assert isinstance(post, gql.GraphQLObjectType)

    async def author_async(obj: Any, info: Any) -> Any:
        return await names(obj["id"])

    post.fields["author"].resolve = (
        (lambda obj, info: names(obj["id"])) if style == "future" else author_async
    )
    result = bgql.graphql_sync(schema, "{ posts { id author { name } } }")
    assert result.data == {
        "posts": [{"id": 1, "author": {"name": "u1"}}, None, {"id": 2, "author": {"name": "u2"}}]
    }
    assert [(e.message, e.path) for e in result.errors or []] == [
        ("no user -1", ["posts", 1, "author"])
    ]


async def test_a_scope_entered_by_the_caller_is_kept() -> None:
    schema = gql.build_schema(SDL)
    schema.query_type.fields["viewer"].resolve = lambda r, i: users_by_id(1)  # type: ignore[union-attr]
    with record() as rec:
        async with batchy.scope():
            await bgql.graphql(schema, "{ viewer { id } }")
            await bgql.graphql(schema, "{ viewer { name } }")
    assert rec.calls(users_by_id) == [[1]]  # one request scope around both: cached


def test_with_batchy_takes_any_class_of_the_installed_line() -> None:
    root = gql.execution.Executor if bgql.GRAPHQL_CORE_33 else gql.execution.ExecutionContext  # type: ignore[attr-defined]
    wrapped = bgql.with_batchy(root)
    schema = gql.build_schema(SDL)
    schema.query_type.fields["viewer"].resolve = lambda r, i: users_by_id(1)  # type: ignore[union-attr]
    result = bgql.graphql_sync(schema, "{ viewer { name } }", execution_context_class=wrapped)
    assert result.data == {"viewer": {"name": "user 1"}}


SHAPES_SDL = """
interface Named { name: String! }
type Person implements Named { name: String!, friend: Named }
type Robot implements Named { name: String!, model: Int! }
type Query { things: [Named!]!, person(id: Int!): Person }
"""


@batchy.batched
def things_by_id(ids: list[int]) -> list[Any]:
    return [
        {"kind": "Person", "name": f"p{i}", "friend": i + 1}
        if i % 2
        else {"kind": "Robot", "name": f"r{i}", "model": i}
        for i in ids
    ]


def shapes_schema() -> gql.GraphQLSchema:
    schema = gql.build_schema(SHAPES_SDL)
    named = schema.get_type("Named")
    person = schema.get_type("Person")
    assert isinstance(named, gql.GraphQLInterfaceType)
    assert isinstance(person, gql.GraphQLObjectType)
    named.resolve_type = lambda obj, info, t: obj["kind"]
    fields = schema.query_type.fields  # type: ignore[union-attr]
    fields["things"].resolve = lambda root, info: [things_by_id(i) for i in (1, 2, 3)]
    fields["person"].resolve = lambda root, info, id: things_by_id(id)
    person.fields["friend"].resolve = lambda obj, info: things_by_id(obj["friend"])
    return schema


@pytest.mark.parametrize("sync", [False, True])
def test_interfaces_fragments_and_aliases(sync: bool) -> None:
    query = """
      query Q($id: Int!) {
        things { __typename name ... on Person { buddy: friend { name } } ... on Robot { model } }
        who: person(id: $id) { name friend { __typename name } }
      }
    """
    schema = shapes_schema()
    with record() as rec:
        if sync:
            result = bgql.graphql_sync(schema, query, variable_values={"id": 5})
        else:
            result = asyncio.run(bgql.graphql(schema, query, variable_values={"id": 5}))
    assert result.errors is None, result.errors
    assert result.data == {
        "things": [
            {"__typename": "Person", "name": "p1", "buddy": {"name": "r2"}},
            {"__typename": "Robot", "name": "r2", "model": 2},
            {"__typename": "Person", "name": "p3", "buddy": {"name": "r4"}},
        ],
        "who": {"name": "p5", "friend": {"__typename": "Robot", "name": "r6"}},
    }
    assert rec.calls(things_by_id) == [[1, 2, 3, 5], [4, 6]]


def test_error_below_an_async_resolver_nulls_the_right_position() -> None:
    # Mixed: an async def list resolver (a graphql-core coroutine) whose items
    # have future fields; one fails on a non-null field under an alias.
    schema = gql.build_schema(NESTED_SDL)
    fields = schema.query_type.fields  # type: ignore[union-attr]

    async def posts(root: Any, info: Any) -> Any:
        await asyncio.sleep(0)
        return [{"id": 1}, {"id": -3}]

    fields["posts"].resolve = posts
    post = schema.get_type("Post")
    assert isinstance(post, gql.GraphQLObjectType)
    post.fields["author"].resolve = lambda obj, info: names(obj["id"])
    result = asyncio.run(bgql.graphql(schema, "{ items: posts { id who: author { name } } }"))
    assert result.data == {"items": [{"id": 1, "who": {"name": "u1"}}, None]}
    assert [(e.message, e.path) for e in result.errors or []] == [
        ("no user -3", ["items", 1, "who"])
    ]


@pytest.mark.skipif(
    not bgql.GRAPHQL_CORE_33, reason="graphql-core 3.2's subscribe() takes no executor class"
)
async def test_each_subscription_event_loads_afresh() -> None:
    # graphql-core 3.3 runs each event on a copy of the subscription's executor,
    # scope included: every event after the first got the first one's values from
    # the loaders' cache, where graphql-core's own executor loads them again.
    data = {1: "a"}
    calls: list[list[int]] = []

    @batchy.batched
    async def users(keys: list[int]) -> list[str]:
        calls.append(list(keys))
        return [data[k] for k in keys]

    schema = gql.build_schema(
        "type Query { x: Int } type Subscription { tick: Ev } type Ev { n: Int, user: String }"
    )

    async def ticks(root: Any, info: Any) -> Any:
        for i in range(3):
            data[1] = f"user at event {i}"
            yield {"n": i}

    schema.subscription_type.fields["tick"].subscribe = ticks  # type: ignore[union-attr]
    schema.subscription_type.fields["tick"].resolve = lambda event, info: event  # type: ignore[union-attr]
    schema.get_type("Ev").fields["user"].resolve = lambda event, info: users(1)  # type: ignore[union-attr]
    option = "executor_class" if bgql.GRAPHQL_CORE_33 else "execution_context_class"
    events = gql.subscribe(
        schema,
        gql.parse("subscription { tick { n user } }"),
        **{option: bgql.BatchyExecutionContext},
    )
    if not hasattr(events, "__aiter__"):
        events = await events
    got = [result.data async for result in events]  # type: ignore[union-attr]
    assert got == [{"tick": {"n": i, "user": f"user at event {i}"}} for i in range(3)]
    assert calls == [[1], [1], [1]]


def test_graphql_core_run_without_batchy_says_to_pass_the_class() -> None:
    # The first mistake: graphql-core's own entry point, and no execution context
    # class. Its default resolver reads ``name`` off the loader's future.
    result = gql.graphql_sync(SCHEMA, "{ user(id: 1) { name } }")
    assert result.data == {"user": None}
    [error] = result.errors or []
    assert error.path == ["user", "name"]
    assert error.message.startswith("'name' was read off the load names(1), a batchy future")
    assert "executor_class=BatchyExecutionContext" in error.message
    assert "execution_context_class= on graphql-core 3.2" in error.message


def test_graphql_core_run_without_batchy_on_a_list_says_expected_iterable() -> None:
    # What cannot be told better: graphql-core looks for an iterable by the class
    # (isinstance, and on 3.3 its sync execution probes nothing else), and a
    # future that looked iterable would mislead every other caller. The guide
    # lists this message under the first mistakes.
    @batchy.batched
    def user_lists(ns: list[int]) -> list[list[dict[str, Any]]]:
        return [[{"id": n, "name": "u"}] for n in ns]

    schema = make_schema()
    schema.query_type.fields["users"].resolve = lambda root, info, ids: user_lists(1)  # type: ignore[union-attr]
    result = gql.graphql_sync(schema, "{ users(ids: [1]) { name } }")
    assert [e.message for e in result.errors or []] == [
        "Expected Iterable, but did not find one for field 'Query.users'."
    ]
    assert bgql.graphql_sync(schema, "{ users(ids: [1]) { name } }").data == {
        "users": [{"name": "u"}]
    }


async def test_graphql_core_awaits_futures_without_batchy_in_async_execution() -> None:
    # Not a mistake that fails: async graphql-core awaits the futures it is given.
    result = await gql.graphql(SCHEMA, "{ user(id: 1) { name } users(ids: [2, 3]) { id } }")
    assert result.errors is None
    assert result.data == {"user": {"name": "u1"}, "users": [{"id": 2}, {"id": 3}]}
