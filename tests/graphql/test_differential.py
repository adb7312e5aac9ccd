"""Differential tests: batchy_contrib.graphql must answer every query exactly as graphql-core does."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import functools
import gc
import inspect
import json
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from datetime import date
from typing import Any

import graphql as gql
import pytest
from aiodataloader import DataLoader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import batchy
from batchy.testing import Recorder, record
from batchy_contrib import graphql as bgql

# -- the harness ----------------------------------------------------------------------
#
# A theme is a schema builder ``make(style)``. The style says how its resolvers
# hand over their values; what they compute is the same in every style:
#
# - "plain": the value itself (graphql-core's reference, with execute_sync);
# - "async": an ``async def`` resolver (graphql-core's reference, with execute);
# - "future": a loader future; a raised error becomes the loader's per-key error;
# - "items": a list of loader futures for a list, one future otherwise;
# - "generator": a generator resolver that waits for a loader, then computes;
# - "await": an ``async def`` resolver awaiting an async loader.
#
# graphql-core runs the "plain" and "async" schemas; batchy runs the schema of
# the test's style, through execute_sync and through execute, and both runs must
# answer what graphql-core answered.

STYLES = ("plain", "async", "future", "items", "generator", "await")
Make = Callable[[str], gql.GraphQLSchema]
Error = tuple[str, Any, list[tuple[int, int]]]


class Box:
    """A loader key that carries its value (hashed by identity: never deduplicated)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


@batchy.batched
def unbox(boxes: list[Box]) -> list[Any]:
    return [box.value for box in boxes]


@batchy.batched
async def aunbox(boxes: list[Box]) -> list[Any]:
    return [box.value for box in boxes]


def _value_or_error(fn: Callable[..., Any], source: Any, info: Any, args: dict[str, Any]) -> Any:
    try:
        return fn(source, info, **args)
    except Exception as error:
        return error


class _BoxLoader(DataLoader):  # type: ignore[misc]
    """graphql-core's usual companion: an asyncio DataLoader, for the ``dl-`` styles."""

    async def batch_load_fn(self, boxes: list[Box]) -> list[Any]:
        return [box.value for box in boxes]


_dataloader: contextvars.ContextVar[_BoxLoader] = contextvars.ContextVar("dataloader")


def _dl_styled(fn: Callable[..., Any], style: str) -> Callable[..., Any]:
    """ "future", "items" and "await" over an asyncio DataLoader, for graphql-core to run."""

    def load(value: Any) -> Any:
        return _dataloader.get().load(Box(value))

    if style == "dl-future":
        return lambda source, info, **args: load(_value_or_error(fn, source, info, args))
    if style == "dl-items":

        def resolve_items(source: Any, info: Any, **args: Any) -> Any:
            value = fn(source, info, **args)
            return [load(item) for item in value] if isinstance(value, list) else load(value)

        return resolve_items

    async def resolve_await(source: Any, info: Any, **args: Any) -> Any:
        return await load(_value_or_error(fn, source, info, args))

    return resolve_await


def styled(fn: Callable[..., Any], style: str) -> Callable[..., Any]:
    """The resolver ``fn`` (a plain resolver) handing over its value in ``style``."""
    if style == "plain":
        return fn
    if style.startswith("dl-"):
        return _dl_styled(fn, style)
    if style == "async":

        async def resolve_async(source: Any, info: Any, **args: Any) -> Any:
            return fn(source, info, **args)

        return resolve_async
    if style == "future":
        return lambda source, info, **args: unbox(Box(_value_or_error(fn, source, info, args)))
    if style == "items":

        def resolve_items(source: Any, info: Any, **args: Any) -> Any:
            value = fn(source, info, **args)  # raises here, in the resolver
            if isinstance(value, list):
                return [unbox(Box(item)) for item in value]
            return unbox(Box(value))

        return resolve_items
    if style == "generator":

        def resolve_generator(source: Any, info: Any, **args: Any) -> Any:
            compute = yield aunbox(Box(fn))  # one round trip, then raise or return
            return compute(source, info, **args)

        return resolve_generator
    assert style == "await"

    async def resolve_await(source: Any, info: Any, **args: Any) -> Any:
        return await aunbox(Box(_value_or_error(fn, source, info, args)))

    return resolve_await


def styled_type_fn(fn: Callable[..., Any], style: str) -> Callable[..., Any]:
    """resolve_type / is_type_of: ``async def`` in the async styles."""
    if style not in ("async", "await"):
        return fn

    async def call(*args: Any) -> Any:
        return fn(*args)

    return call


def attach(
    schema: gql.GraphQLSchema,
    style: str,
    resolvers: Mapping[str, Callable[..., Any]],
    resolve_types: Mapping[str, Callable[..., Any]] | None = None,
    is_type_ofs: Mapping[str, Callable[..., Any]] | None = None,
) -> gql.GraphQLSchema:
    """Set the resolvers ("Type.field": fn) of a built schema, in ``style``."""
    for where, fn in resolvers.items():
        type_name, field_name = where.split(".")
        schema.get_type(type_name).fields[field_name].resolve = styled(fn, style)  # type: ignore[union-attr]
    for type_name, fn in (resolve_types or {}).items():
        schema.get_type(type_name).resolve_type = styled_type_fn(fn, style)  # type: ignore[union-attr]
    for type_name, fn in (is_type_ofs or {}).items():
        schema.get_type(type_name).is_type_of = styled_type_fn(fn, style)  # type: ignore[union-attr]
    return schema


def dumps(value: Any) -> str:
    """JSON text that keeps the key order of every dict (the response order matters)."""
    return json.dumps(value, default=repr)


def errors_of(result: gql.ExecutionResult) -> list[Error]:
    return [
        (e.message, e.path, [(loc.line, loc.column) for loc in e.locations or []])
        for e in result.errors or []
    ]


def in_order(errors: list[Error]) -> list[Error]:
    return sorted(errors, key=dumps)


def nulled_at(data: Any, path: Any) -> tuple[Any, ...]:
    """The position an error at ``path`` nulled: its shortest prefix that is null in ``data``."""
    if data is None or path is None:
        return ()
    node = data
    for depth, key in enumerate(path):
        node = node[key]
        if node is None:
            return tuple(path[: depth + 1])
    return tuple(path)


async def _resolved(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def reference(
    style: str,
    schema: gql.GraphQLSchema,
    document: gql.DocumentNode,
    args: tuple[Any, ...],
    collect: bool = False,
    **kwargs: Any,
) -> gql.ExecutionResult:
    """graphql-core's own answer: execute_sync for "plain", execute for "async"."""
    if style == "async":
        return _core_async(lambda: gql.execute(schema, document, *args, **kwargs), collect)
    return gql.execute_sync(schema, document, *args, **kwargs)


def _core_async(execute: Callable[[], Any], collect: bool = False) -> gql.ExecutionResult:
    """graphql-core's ``execute``, run on a loop of its own."""
    with warnings.catch_warnings():
        # graphql-core leaves unawaited some coroutines of the fields it skips
        # after an error (its own, not batchy's): collect them here. On 3.2
        # that is when the data is null; ``collect`` for any error, on both.
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        result = asyncio.run(_resolved(execute()))
        if result.errors and (collect or (result.data is None and not bgql.GRAPHQL_CORE_33)):
            for error in result.errors:
                # The tracebacks hold the frames that hold those coroutines.
                error.__traceback__ = None
                if error.original_error is not None:
                    error.original_error.__traceback__ = None
            gc.collect(1)  # they are young
    return result  # type: ignore[no-any-return]


# The reference for a loader style: graphql-core running the same values over
# an asyncio DataLoader (a generator resolver is batchy's own: the future style's).
DL_STYLE = {
    "future": "dl-future",
    "items": "dl-items",
    "await": "dl-await",
    "generator": "dl-future",
}


def loaded_reference(
    make: Make,
    style: str,
    document: gql.DocumentNode,
    args: tuple[Any, ...],
    collect: bool = not bgql.GRAPHQL_CORE_33,
    **kwargs: Any,
) -> gql.ExecutionResult:
    """What graphql-core answers when the values of ``style`` come from a DataLoader."""

    def execute() -> Any:
        _dataloader.set(_BoxLoader())  # in the loop's task: the loader's own loop
        return gql.execute(make(DL_STYLE[style]), document, *args, **kwargs)

    async def run() -> Any:
        return await _resolved(execute())

    return _core_async(run, collect)


def subject(
    schema: gql.GraphQLSchema,
    document: gql.DocumentNode,
    args: Callable[[], tuple[Any, ...]],
    **kwargs: Any,
) -> dict[str, tuple[gql.ExecutionResult, Recorder]]:
    """batchy's answers, through execute_sync and through execute, with the batches made."""
    runs = {}
    with record() as rec:
        runs["execute_sync"] = (bgql.execute_sync(schema, document, *args(), **kwargs), rec)

    async def run_async() -> gql.ExecutionResult:
        return await bgql.execute(schema, document, *args(), **kwargs)

    with record() as rec:
        runs["execute"] = (asyncio.run(run_async()), rec)
    return runs


def check(
    make: Make,
    query: str,
    style: str = "plain",
    *,
    variables: dict[str, Any] | None = None,
    root: Any = None,
    context: Any = None,
    make_context: Callable[[], Any] | None = None,
    operation_name: str | None = None,
    race: bool = False,
    lenient: bool = False,
    loader_messages: bool = False,
    kwargs_for: Callable[[str], dict[str, Any]] | None = None,
    collect: bool = False,
) -> dict[str, Recorder]:
    """Assert that batchy answers ``query`` on ``make(style)`` as graphql-core does.

    ``race``: several errors race to null one position, and which one graphql-core
    keeps depends on the order its resolvers run, so its sync and async runs may
    keep different ones. batchy must keep what graphql-core keeps for the same
    resolvers: in the plain and async styles (values that never wait) what
    ``execute_sync`` keeps; in a loader style what graphql-core keeps when the
    same values come from a DataLoader (:func:`loaded_reference`).
    ``lenient``: no exact reference (a race graphql-core decides by its asyncio
    task order); then the data must be equal, the errors not below a nulled
    position the same, and the errors of both must null the same positions.
    ``loader_messages``: batchy wraps the error of a failed batch (LoaderError);
    its message must contain graphql-core's. ``collect``: collect what
    graphql-core's async runs leave after any error. Returns the batches each
    of batchy's runs made.
    """
    document = gql.parse(query)
    assert gql.validate(make("plain"), document) == [], "the case's query must be valid"

    def args() -> tuple[Any, ...]:
        return (root, make_context() if make_context else context, variables, operation_name)

    def kwargs(of_style: str) -> dict[str, Any]:
        return kwargs_for(of_style) if kwargs_for else {}

    expected = [
        reference(s, make(s), document, args(), collect, **kwargs(s)) for s in ("plain", "async")
    ]
    assert dumps(expected[0].data) == dumps(expected[1].data), "graphql-core disagrees with itself"
    if race and not lenient:
        if style in DL_STYLE:
            loaded = loaded_reference(
                make, style, document, args(), collect or not bgql.GRAPHQL_CORE_33, **kwargs(style)
            )
            assert dumps(loaded.data) == dumps(expected[0].data), "graphql-core's DataLoader run"
            expected = [loaded]
        expected = [expected[0], expected[0]]  # the one reference, strictly
    runs = subject(make(style), document, args, **kwargs(style))
    for name, (result, _) in runs.items():
        where = f"batchy {name} ({style})"
        assert result.data == expected[0].data, where
        assert dumps(result.data) == dumps(expected[0].data), where  # and the key order
        got = errors_of(result)
        if loader_messages:
            got = [_as_reference_message(error, errors_of(expected[0])) for error in got]
        if not lenient:
            want = in_order(errors_of(expected[0]))
            assert want == in_order(errors_of(expected[1])), (
                "graphql-core's sync and async errors differ: make the case a race"
            )
            assert in_order(got) == want, where
            continue
        for ref in expected:
            assert _not_under_nulls(got, result.data) == _not_under_nulls(
                errors_of(ref), ref.data
            ), where
            assert _nulled(got, result.data) == _nulled(errors_of(ref), ref.data), where
    return {name: rec for name, (_, rec) in runs.items()}


def _not_under_nulls(errors: list[Error], data: Any) -> list[Error]:
    """The errors whose own position is the one they nulled (none raced for it)."""
    return in_order([e for e in errors if nulled_at(data, e[1]) == tuple(e[1] or ())])


def _nulled(errors: list[Error], data: Any) -> set[tuple[Any, ...]]:
    """The positions the errors nulled (each must be explained by an error below it)."""
    return {nulled_at(data, e[1]) for e in errors}


def _as_reference_message(error: Error, reference_errors: list[Error]) -> Error:
    message, path, locations = error
    for ref_message, ref_path, _ in reference_errors:
        if ref_path == path and ref_message in message:
            return (ref_message, path, locations)
    return error


def styles(*cases: Any) -> list[Any]:
    """Each case (a pytest.param or a query) once per style; a case's marks apply to each."""
    params = []
    for case in cases:
        param = case if isinstance(case, type(pytest.param())) else pytest.param(case, id=case)
        params += [
            pytest.param(*param.values, style, marks=param.marks, id=f"{param.id}-{style}")
            for style in STYLES
        ]
    return params


# -- theme: selections (aliases, merging, fragments, directives, variables, arguments) --

FIELDS_SDL = """
type Query {
  me: User
  user(id: Int!): User
  users(ids: [Int!]!): [User!]!
  greet(name: String = "world", times: Int = 1, loud: Boolean): String!
  args(a: Int, b: String = "dflt", c: [Int], d: Filter, e: Color, f: Int! = 7): String!
}
input Filter { min: Int = 0, max: Int, tags: [String!] }
enum Color { RED GREEN BLUE }
type User {
  id: ID!
  name: String!
  age: Int
  nick(style: Int!): String
  take(xs: [Int]): Int
  tags: [String]
  friends(first: Int = 2): [User!]!
  bestFriend: User
}
"""

USERS: dict[int, dict[str, Any]] = {
    1: {
        "id": 1,
        "name": "Ada",
        "age": 36,
        "nick": "ada",
        "tags": ["a", None],
        "friends": [2, 3, 4],
    },
    2: {"id": 2, "name": "Bob", "age": None, "nick": "bo", "tags": [], "friends": [1]},
    3: {"id": 3, "name": "Cy", "age": 20, "nick": None, "tags": None, "friends": []},
    4: {"id": 4, "name": "Di", "age": 51, "nick": "d", "tags": ["x"], "friends": [3, 2]},
}
BEST = {1: 2, 2: 1, 3: None, 4: 99}


def _greet(root: Any, info: Any, name: str, times: int, loud: Any = "omitted") -> str:
    return f"hello {name} x{times} loud={loud!r}"


@functools.cache
def make_fields(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(FIELDS_SDL),
        style,
        {
            "Query.me": lambda root, info: USERS[1],
            "Query.user": lambda root, info, id: USERS.get(id),
            "Query.users": lambda root, info, ids: [USERS[i] for i in ids],
            "Query.greet": _greet,
            "Query.args": lambda root, info, **args: json.dumps(args, sort_keys=True),
            "User.friends": lambda user, info, first: [USERS[i] for i in user["friends"][:first]],
            "User.bestFriend": lambda user, info: USERS.get(BEST[user["id"]]),  # type: ignore[arg-type]
            "User.take": lambda user, info, xs: xs.pop(),  # mutates its argument
        },
    )


FIELD_CASES = [
    pytest.param("{ a: user(id: 1) { n: name } b: user(id: 2) { name id } }", None, id="aliases"),
    pytest.param("{ user(id: 1) { first: name first: name } }", None, id="same-alias-twice"),
    pytest.param(
        "{ user(id: 1) { name friends { name } } user(id: 1) { id friends { id age } } }",
        None,
        id="merged-subselections",
    ),
    pytest.param(
        "{ me { friends { name } } me { friends { id bestFriend { name } } } }",
        None,
        id="merged-deep",
    ),
    pytest.param(
        "{ me { f1: friends(first: 1) { id } f3: friends(first: 3) { name } } }",
        None,
        id="aliased-arguments",
    ),
    pytest.param(
        "query { me { ...F } } fragment F on User { id name friends { ...G } }"
        " fragment G on User { name age }",
        None,
        id="fragments",
    ),
    pytest.param(
        "{ me { id ...F name } } fragment F on User { age name id tags }",
        None,
        id="fragment-field-order",
    ),
    pytest.param("{ me { ... on User { name } ... { id } } }", None, id="inline-fragments"),
    pytest.param(
        "{ me { id @skip(if: true) name @include(if: false) age @include(if: true) } }",
        None,
        id="skip-include-literals",
    ),
    pytest.param(
        "{ me { name @skip(if: true) name tags @skip(if: false) @include(if: false) } }",
        None,
        id="skip-merged-and-both",
    ),
    pytest.param(
        "{ me { ... @include(if: false) { id } ...F @skip(if: false) ... @skip(if: true) { age } } }"
        " fragment F on User { name }",
        None,
        id="skip-include-on-fragments",
    ),
    *[
        pytest.param(
            "query ($s: Boolean!, $i: Boolean!) {"
            " me { id @skip(if: $s) name @include(if: $i) friends @include(if: $i) { id } } }",
            {"s": s, "i": i},
            id=f"skip-include-variables-{s}-{i}",
        )
        for s in (False, True)
        for i in (False, True)
    ],
    pytest.param("query ($id: Int = 2) { user(id: $id) { name } }", None, id="variable-default"),
    pytest.param("query ($id: Int = 2) { user(id: $id) { name } }", {"id": 3}, id="variable-set"),
    pytest.param(
        "query ($loud: Boolean) { greet(loud: $loud) }", None, id="missing-nullable-variable"
    ),
    pytest.param("query ($loud: Boolean) { greet(loud: $loud) }", {"loud": None}, id="null-var"),
    pytest.param('{ greet greet2: greet(name: "you", times: 3) }', None, id="argument-defaults"),
    pytest.param("{ args }", None, id="args-none-given"),
    pytest.param(
        "{ args(a: 1, b: null, c: [1, null], d: {max: 3, tags: []}, e: RED, f: 1) }",
        None,
        id="args-literals",
    ),
    pytest.param("{ args(c: 1) }", None, id="args-list-from-single-value"),
    pytest.param(
        "query ($d: Filter, $c: [Int], $e: Color) { args(d: $d, c: $c, e: $e) }",
        {"d": {"tags": ["x"]}, "c": 5, "e": "BLUE"},
        id="args-variables",
    ),
    pytest.param(
        "query ($a: Int) { args(a: $a) other: args(a: 1) }", {}, id="args-missing-variable"
    ),
    pytest.param("{ users(ids: [4, 1]) { bestFriend { name } } }", None, id="missing-object"),
    pytest.param(
        "query ($id: Int!) { user(id: $id) { name } }", {"id": "x"}, id="variable-coercion-error"
    ),
    pytest.param(
        "{ users(ids: [1, 2, 3]) { take(xs: [1, 2, 3]) } }",
        None,
        id="resolver-mutates-its-arguments",
    ),
    pytest.param("query ($n: Int = 1) { user(id: $n) { name } }", {"n": None}, id="argument-error"),
    pytest.param(
        "query ($n: Int = 1) { me { name nick(style: $n) } }",
        {"n": None},
        id="argument-error-default-resolver",
    ),
]


@pytest.mark.parametrize(("query", "variables", "style"), styles(*FIELD_CASES))
def test_selections(query: str, variables: dict[str, Any] | None, style: str) -> None:
    check(make_fields, query, style, variables=variables)


# -- theme: lists ---------------------------------------------------------------------

LISTS_SDL = """
type Query {
  ints: [Int]
  matrix: [[Int]]
  strictMatrix: [[Int!]!]
  strictInts: [Int!]!
  objs: [Obj]
  holder: Holder
  tuple: [Int]
  genexpr: [Int]
  frozen: [Int]
  notIterable: [Int]
  stringAsList: [String]
  dictAsList: [String]
  errorItems: [String]
  iterator: [Int]
  weird: Obj
}
type Holder {
  strictInts: [Int!]!
  strictItems: [Int!]
  strictList: [Int]!
  objs: [Obj!]
  strictObjs: [Obj!]!
  matrix: [[Int!]]
  deep: [[Obj!]!]
  notIterable: [Obj]!
  ok: String
}
type Obj { id: Int!, name: String, strict: String! }
"""

OBJ = {"id": 1, "name": "one", "strict": "s"}
OBJ_BROKEN = {"id": 2, "name": "two", "strict": None}


@functools.cache
def make_lists(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(LISTS_SDL),
        style,
        {
            "Query.ints": lambda root, info: [1, None, 3],
            "Query.matrix": lambda root, info: [[1, 2], [None], [], None],
            "Query.strictMatrix": lambda root, info: [[1], [2, None], [3]],
            "Query.strictInts": lambda root, info: [1, 2],
            "Query.objs": lambda root, info: [OBJ, None, OBJ_BROKEN, OBJ],
            "Query.holder": lambda root, info: {},
            "Query.tuple": lambda root, info: (1, 2),
            "Query.genexpr": lambda root, info: (i * i for i in range(4)),
            "Query.frozen": lambda root, info: frozenset({7}),
            "Query.notIterable": lambda root, info: 5,
            "Query.stringAsList": lambda root, info: "abc",
            "Query.dictAsList": lambda root, info: {"a": 1},
            "Query.errorItems": lambda root, info: ["a", ValueError("bad item"), "c"],
            "Query.iterator": lambda root, info: iter([1, 2]),
            "Query.weird": lambda root, info: 42,
            "Holder.strictInts": lambda holder, info: [1, None],
            "Holder.strictItems": lambda holder, info: [1, None, 3],
            "Holder.strictList": lambda holder, info: None,
            "Holder.objs": lambda holder, info: [OBJ, None],
            "Holder.strictObjs": lambda holder, info: [OBJ, OBJ_BROKEN],
            "Holder.matrix": lambda holder, info: [[1], [None, 2], None],
            "Holder.deep": lambda holder, info: [[OBJ], [OBJ, None]],
            "Holder.notIterable": lambda holder, info: object(),
            "Holder.ok": lambda holder, info: "ok",
        },
    )


LIST_CASES = [
    pytest.param("{ ints }", id="nullable-items"),
    pytest.param("{ matrix }", id="nested-list"),
    pytest.param("{ strictMatrix }", id="nested-non-null-item"),
    pytest.param("{ strictInts }", id="non-null-list"),
    pytest.param("{ objs { id name } }", id="object-items"),
    pytest.param("{ objs { id strict } }", id="object-item-nulled"),
    pytest.param("{ tuple genexpr frozen }", id="other-iterables"),
    pytest.param("{ notIterable }", id="not-iterable"),
    pytest.param("{ stringAsList }", id="string-is-not-a-list"),
    pytest.param("{ dictAsList }", id="mapping-is-not-a-list"),
    pytest.param("{ errorItems }", id="exception-items"),
    pytest.param("{ iterator }", id="iterator"),
    pytest.param("{ weird { name } }", id="int-as-object"),
    pytest.param("{ weird { id } }", id="int-as-object-non-null-field"),
    pytest.param("{ holder { ok strictInts } }", id="null-in-non-null-list-nulls-parent"),
    pytest.param("{ holder { ok strictItems } }", id="null-item-nulls-list"),
    pytest.param("{ holder { ok strictList } }", id="null-non-null-list"),
    pytest.param("{ holder { ok objs { id } } }", id="null-object-item"),
    pytest.param("{ holder { ok strictObjs { id strict } } }", id="item-error-up-two-levels"),
    pytest.param("{ holder { ok matrix } }", id="nested-null-item"),
    pytest.param("{ holder { ok deep { id } } }", id="deep-null-item"),
    pytest.param("{ holder { ok notIterable { id } } }", id="not-iterable-non-null"),
    pytest.param(
        "{ ints holder { ok strictItems } objs { strict } matrix }", id="errors-everywhere"
    ),
]


@pytest.mark.parametrize(("query", "style"), styles(*LIST_CASES))
def test_lists(query: str, style: str) -> None:
    check(make_lists, query, style)


# -- theme: non-null propagation --------------------------------------------------------

NONNULL_SDL = """
type Query { a: A, aStrict: A!, as: [A], asStrict: [A!], ok: String }
type A {
  ok: String
  fail: String
  failStrict: String!
  nullStrict: String!
  b: B
  bStrict: B!
  list: [B!]
  listStrict: [B!]!
}
type B { ok: String, c: String, cStrict: String!, fail: String, failStrict: String!, inner: B! }
"""


def _fail(source: Any, info: Any) -> Any:
    raise ValueError(f"failed at {info.path.as_list()}")


@functools.cache
def make_nonnull(style: str) -> gql.GraphQLSchema:
    ok = lambda source, info: "ok"  # noqa: E731
    return attach(
        gql.build_schema(NONNULL_SDL),
        style,
        {
            "Query.a": lambda root, info: {},
            "Query.aStrict": lambda root, info: {},
            "Query.as": lambda root, info: [{}, {}, {}],
            "Query.asStrict": lambda root, info: [{}, {}],
            "Query.ok": ok,
            "A.ok": ok,
            "A.fail": _fail,
            "A.failStrict": _fail,
            "A.nullStrict": lambda a, info: None,
            "A.b": lambda a, info: {},
            "A.bStrict": lambda a, info: {},
            "A.list": lambda a, info: [{}, {}],
            "A.listStrict": lambda a, info: [{}, {}],
            "B.ok": ok,
            "B.fail": _fail,
            "B.failStrict": _fail,
            "B.inner": lambda b, info: {},
        },
    )


# The second value: "" (no race), "race" (several errors race to null one
# position; see check()), or "race-by-tasks" (in the loader styles graphql-core
# decides that race by the order of its asyncio tasks: lenient there).
NONNULL_CASES = [
    pytest.param("{ a { ok fail } }", "", id="nullable-field-error"),
    pytest.param("{ a { ok failStrict } ok }", "", id="non-null-error-nulls-parent"),
    pytest.param("{ a { ok nullStrict } ok }", "", id="null-for-non-null"),
    pytest.param("{ a { b { ok failStrict } ok } }", "", id="nulls-depth-2"),
    pytest.param("{ a { ok bStrict { ok failStrict } } ok }", "", id="nulls-grandparent"),
    pytest.param("{ ok aStrict { bStrict { failStrict } } }", "", id="nulls-data"),
    pytest.param("{ ok aStrict { nullStrict } }", "", id="null-nulls-data"),
    pytest.param("{ a { list { ok failStrict } } }", "", id="item-nulls-list"),
    pytest.param("{ a { ok listStrict { failStrict } } }", "", id="item-nulls-list-parent"),
    pytest.param("{ as { ok bStrict { failStrict } } }", "", id="each-item-nulled"),
    pytest.param("{ a { b { c cStrict } ok } }", "", id="default-resolver-null"),
    pytest.param(
        "{ a { fail b { fail } } x: a { failStrict } y: a { b { failStrict } } }",
        "",
        id="errors-at-many-positions",
    ),
    pytest.param("{ asStrict { failStrict } ok }", "race", id="sibling-items-race"),
    pytest.param("{ a { bStrict { failStrict } failStrict } }", "race", id="siblings-race"),
    pytest.param("{ a { fail bStrict { failStrict } } }", "", id="error-before-nulling"),
    pytest.param(
        "{ a { listStrict { ok failStrict } b { failStrict } } }",
        "race-by-tasks",
        id="deep-siblings-race",
    ),
    pytest.param(
        "{ a { bStrict { x: failStrict y: failStrict } failStrict } }",
        "race",
        id="siblings-race-two-below",
    ),
    pytest.param("{ a { bStrict { ok failStrict } failStrict } }", "race", id="siblings-race-ok"),
    pytest.param(
        "{ a { bStrict { inner { failStrict } } failStrict } }", "race", id="siblings-race-deeper"
    ),
    pytest.param("{ a { failStrict bStrict { failStrict } } }", "race", id="siblings-race-first"),
]


@pytest.mark.parametrize(("query", "race", "style"), styles(*NONNULL_CASES))
def test_non_null_propagation(query: str, race: str, style: str) -> None:
    # Races, found on both lines (see check() for what batchy must keep):
    # - siblings-race: graphql-core's sync run (and 3.3's async run) reports
    #   a.bStrict.failStrict: the first in document order, depth first, as the
    #   async resolvers run at once up to their first wait. 3.2's async run
    #   reports a.failStrict (it makes a task per field), and so does
    #   graphql-core over a DataLoader, where a.failStrict fails a round earlier.
    # - siblings-race-two-below / -ok: 3.3's async run reports a.failStrict too,
    #   as B's two fields become tasks queued after a.failStrict's; its sync
    #   run, and batchy's async style, report the error inside bStrict.
    # - deep-siblings-race, loader styles: graphql-core over a DataLoader also
    #   reports a.b.failStrict, which nulled b before the list's error nulled a:
    #   its tasks queue b's load ahead of the list items' in the same batch;
    #   batchy issues the loads of one round in the order positions resumed.
    # - the errors that arrive below a position already nulled are dropped by
    #   graphql-core 3.3 and 3.2.14 (its CollectedErrors), and by batchy.
    lenient = race == "race-by-tasks" and style in DL_STYLE
    check(make_nonnull, query, style, race=bool(race), lenient=lenient)


# -- theme: errors and leaf values (a schema of GraphQL* objects) -------------------------


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque>"


class Shade(enum.Enum):
    BLUE = "blue"


def _raise(error: Callable[[], Exception]) -> Callable[..., Any]:
    # A fresh error per call: a raised one keeps its traceback, and with it the
    # frames and the event loop of the test that raised it.
    def resolve(source: Any, info: Any) -> Any:
        raise error()

    return resolve


def _serialize_date(value: Any) -> Any:
    if isinstance(value, date):
        return None if value.year == 1 else value.isoformat()
    raise TypeError(f"Date cannot represent {value!r}")


def _leaf_fields(style: str) -> dict[str, tuple[Any, Any]]:
    """Field name: (output type, plain resolver)."""
    color = gql.GraphQLEnumType(
        "Color",
        {
            "RED": gql.GraphQLEnumValue(1),
            "GREEN": gql.GraphQLEnumValue("green"),
            "BLUE": gql.GraphQLEnumValue(Shade.BLUE),
        },
    )
    date_type = gql.GraphQLScalarType("Date", serialize=_serialize_date)
    value = lambda v: lambda source, info: v  # noqa: E731
    return {
        "ok": (gql.GraphQLString, value("ok")),
        "graphqlError": (
            gql.GraphQLString,
            _raise(lambda: gql.GraphQLError("custom GraphQLError")),
        ),
        "presetPath": (
            gql.GraphQLString,
            _raise(lambda: gql.GraphQLError("own path", path=["x", 1])),
        ),
        "valueError": (gql.GraphQLString, _raise(lambda: ValueError("bad value"))),
        "keyError": (gql.GraphQLString, _raise(lambda: KeyError("k"))),
        "returnsError": (gql.GraphQLString, lambda source, info: ValueError("returned")),
        "wrongString": (gql.GraphQLString, value(Opaque())),
        "stringFromInt": (gql.GraphQLString, value(42)),
        "stringFromFloat": (gql.GraphQLString, value(1.5)),
        "stringFromBool": (gql.GraphQLString, value(True)),
        "bigInt": (gql.GraphQLInt, value(2**40)),
        "floatAsInt": (gql.GraphQLInt, value(1.5)),
        "wholeFloat": (gql.GraphQLInt, value(3.0)),
        "intFromString": (gql.GraphQLInt, value("12")),
        "intFromBool": (gql.GraphQLInt, value(False)),
        "badBool": (gql.GraphQLBoolean, value("x")),
        "boolFromInt": (gql.GraphQLBoolean, value(1)),
        "idFromInt": (gql.GraphQLID, value(7)),
        "badId": (gql.GraphQLID, value(1.5)),
        "nan": (gql.GraphQLFloat, value(math.nan)),
        "floatFromString": (gql.GraphQLFloat, value("1.5")),
        "floatFromInt": (gql.GraphQLFloat, value(2)),
        "color": (color, value(1)),
        "colorFromEnum": (color, value(Shade.BLUE)),
        "colorFromName": (color, value("RED")),
        "badColor": (color, value(4)),
        "colors": (gql.GraphQLList(color), value([1, "green", Shade.BLUE, 4, None])),
        "date": (date_type, value(date(2024, 2, 29))),
        "badDate": (date_type, value("2024")),
        "nullDate": (date_type, value(date(1, 1, 1))),
        "dates": (gql.GraphQLList(gql.GraphQLNonNull(date_type)), value([date(2000, 1, 2), 3])),
        "ints": (gql.GraphQLList(gql.GraphQLInt), value([1, 2**40, "x", None, 3])),
        "strings": (gql.GraphQLList(gql.GraphQLString), value(["a", 1, True, None, Opaque()])),
        "bools": (gql.GraphQLList(gql.GraphQLNonNull(gql.GraphQLBoolean)), value([True, 0, "x"])),
        "floatFromBool": (gql.GraphQLFloat, value(True)),
    }


@functools.cache
def make_leaves(style: str) -> gql.GraphQLSchema:
    leaves = _leaf_fields(style)
    fields = {
        name: gql.GraphQLField(t, resolve=styled(fn, style)) for name, (t, fn) in leaves.items()
    }
    strict = gql.GraphQLObjectType(
        "Strict",
        lambda: {
            "ok": gql.GraphQLField(gql.GraphQLString, resolve=styled(leaves["ok"][1], style)),
            **{
                name: gql.GraphQLField(
                    gql.GraphQLNonNull(leaves[name][0]), resolve=styled(leaves[name][1], style)
                )
                for name in ("wrongString", "bigInt", "badColor", "returnsError", "nullDate")
            },
        },
    )
    fields["strict"] = gql.GraphQLField(strict, resolve=styled(lambda root, info: {}, style))
    return gql.GraphQLSchema(gql.GraphQLObjectType("Query", fields))


LEAF_NAMES = list(_leaf_fields("plain"))
STRICT_LEAF_NAMES = ["wrongString", "bigInt", "badColor", "returnsError", "nullDate"]


@pytest.mark.parametrize(
    ("query", "style"), styles(*[pytest.param(f"{{ {name} }}", id=name) for name in LEAF_NAMES])
)
def test_leaf_values_and_errors(query: str, style: str) -> None:
    check(make_leaves, query, style)


@pytest.mark.parametrize(
    ("query", "style"),
    styles(
        *[pytest.param(f"{{ strict {{ ok {name} }} ok }}", id=name) for name in STRICT_LEAF_NAMES]
    ),
)
def test_leaf_errors_in_non_null_positions(query: str, style: str) -> None:
    check(make_leaves, query, style)


@pytest.mark.parametrize("style", STYLES)
def test_all_leaves_in_one_query(style: str) -> None:
    check(make_leaves, "{ " + " ".join(LEAF_NAMES) + " a: ok }", style)


@pytest.mark.parametrize(
    ("make", "query"),
    [
        pytest.param(
            make_leaves, "{ " + " ".join(LEAF_NAMES) + " strict { ok bigInt } }", id="leaves"
        ),
        pytest.param(
            make_nonnull,
            "{ a { fail b { fail } } x: a { failStrict } y: a { b { failStrict } } as { fail } }",
            id="nonnull",
        ),
        pytest.param(
            make_lists,
            "{ ints holder { ok strictItems } objs { strict } errorItems notIterable }",
            id="lists",
        ),
    ],
)
def test_errors_keep_graphql_cores_order_on_a_sync_schema(make: Make, query: str) -> None:
    # Everywhere else errors are compared sorted; with plain values batchy runs
    # depth-first as graphql-core's execute_sync does, and reports in its order.
    document = gql.parse(query)
    expected = gql.execute_sync(make("plain"), document)
    assert len(expected.errors or []) > 3
    for name, (result, _) in subject(make("plain"), document, tuple).items():
        assert dumps(result.data) == dumps(expected.data), name
        assert errors_of(result) == errors_of(expected), name


# -- theme: abstract types ---------------------------------------------------------------

ABSTRACT_SDL = """
interface Named { name: String! }
interface Titled { title: String! }
type Dog implements Named { name: String!, barks: Boolean! }
type Cat implements Named { name: String!, lives: Int! }
union Pet = Dog | Cat
type Bird { name: String!, wings: Int! }
type Fish { name: String!, fins: Int! }
union Animal = Bird | Fish
type Book implements Titled { title: String!, pages: Int }
type Movie implements Titled { title: String!, minutes: Int }
union Media = Book | Movie
type Query {
  pets: [Pet]
  named: [Named]
  firstNamed: Named!
  animals: [Animal]
  bird: Bird
  notBird: Bird
  media: [Media]
  titled: [Titled]
  wrongName: Pet
  notPossible: Pet
  noName: Pet
  typeObject: Pet
  noTypename: Media
  strictPets: [Pet!]
  resolveTypeFails: Pet
  isTypeOfFails: Bird
}
"""


class Bird:
    def __init__(self, name: str) -> None:
        self.name = name
        self.wings = 2


class Fish:
    def __init__(self, name: str) -> None:
        self.name = name
        self.fins = 5


DOG = {"kind": "Dog", "name": "Rex", "barks": True}
CAT = {"kind": "Cat", "name": "Tom", "lives": 9}


def _by_kind(value: Any, info: Any, abstract: Any) -> Any:
    kind = value.get("kind")
    if kind == "BOOM":
        raise ValueError("resolve_type failed")
    return info.schema.get_type("Dog") if kind == "TYPE_OBJECT" else kind


def _is_bird(value: Any, info: Any) -> bool:
    if value == "BOOM":
        raise ValueError("is_type_of failed")
    return isinstance(value, Bird)


@functools.cache
def make_abstract(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(ABSTRACT_SDL),
        style,
        {
            "Query.pets": lambda root, info: [DOG, CAT, None, DOG],
            "Query.named": lambda root, info: [CAT, DOG],
            "Query.firstNamed": lambda root, info: DOG,
            "Query.animals": lambda root, info: [Bird("tweety"), Fish("nemo"), None],
            "Query.bird": lambda root, info: Bird("zazu"),
            "Query.notBird": lambda root, info: Fish("dory"),
            "Query.media": lambda root, info: [
                {"__typename": "Book", "title": "Dune", "pages": 412},
                {"__typename": "Movie", "title": "Alien", "minutes": 117},
            ],
            "Query.titled": lambda root, info: [
                {"__typename": "Movie", "title": "Heat", "minutes": 170},
                {"__typename": "Book", "title": "Emma"},
            ],
            "Query.wrongName": lambda root, info: {"kind": "Nope"},
            "Query.notPossible": lambda root, info: {"kind": "Book", "title": "x"},
            "Query.noName": lambda root, info: {"kind": None},
            "Query.typeObject": lambda root, info: {"kind": "TYPE_OBJECT", "name": "Obj"},
            "Query.noTypename": lambda root, info: {"title": "anonymous"},
            "Query.strictPets": lambda root, info: [DOG, {"kind": "Nope"}],
            "Query.resolveTypeFails": lambda root, info: {"kind": "BOOM"},
            "Query.isTypeOfFails": lambda root, info: "BOOM",
        },
        resolve_types={"Pet": _by_kind, "Named": _by_kind},
        is_type_ofs={
            "Bird": _is_bird,
            "Fish": lambda value, info: isinstance(value, Fish),
        },
    )


ABSTRACT_CASES = [
    pytest.param(
        "{ pets { __typename ... on Dog { name barks } ... on Cat { name lives } } }",
        id="union-resolve-type",
    ),
    pytest.param(
        "{ pets { ... on Named { name } ...DogBits } } fragment DogBits on Dog { barks }",
        id="union-interface-fragment",
    ),
    pytest.param(
        "{ named { __typename name ... on Cat { lives } } firstNamed { name } }",
        id="interface-resolve-type",
    ),
    pytest.param("{ named { name ... on Dog { name barks } } }", id="interface-merged"),
    pytest.param("{ named { ... on Pet { __typename } } }", id="union-fragment-in-interface"),
    pytest.param(
        "{ animals { __typename ... on Bird { name wings } ... on Fish { fins name } } }",
        id="is-type-of",
    ),
    pytest.param("{ bird { name wings } }", id="object-is-type-of"),
    pytest.param("{ notBird { name } }", id="object-is-type-of-false"),
    pytest.param(
        "{ media { __typename ... on Book { title pages } ... on Movie { title minutes } } }",
        id="typename-key",
    ),
    pytest.param(
        "{ titled { title ... on Movie { minutes } __typename } }", id="interface-typename-key"
    ),
    pytest.param("{ wrongName { __typename } }", id="unknown-type-name"),
    pytest.param("{ notPossible { __typename } }", id="not-a-possible-type"),
    pytest.param("{ noName { __typename } }", id="no-type-name"),
    pytest.param("{ typeObject { __typename } }", id="type-object-returned"),
    pytest.param("{ noTypename { __typename } }", id="no-typename-key"),
    pytest.param("{ strictPets { __typename } }", id="type-error-nulls-list"),
    pytest.param("{ resolveTypeFails { __typename } }", id="resolve-type-raises"),
    pytest.param("{ isTypeOfFails { name } }", id="is-type-of-raises"),
    pytest.param("{ __typename pets { __typename } named { __typename } }", id="typename"),
    pytest.param(
        "query Q { ...Root } fragment Root on Query { __typename media { ...M } }"
        " fragment M on Media { ... on Titled { title } }",
        id="fragments-all-the-way",
    ),
]


@pytest.mark.parametrize(("query", "style"), styles(*ABSTRACT_CASES))
def test_abstract_types(query: str, style: str) -> None:
    check(make_abstract, query, style)


# -- theme: graphql-core's default resolver, root_value and context_value ---------------------


class Thing:
    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.callable_attr = lambda info, **args: f"attr {info.field_name} {args}"

    def greet(self, info: Any, name: str) -> str:
        return f"{self.name} greets {name} via {info.parent_type.name}.{info.field_name}"

    @property
    def upper(self) -> str:
        return self.name.upper()


class ThingMapping(Mapping[str, Any]):
    """A Mapping that is not a dict: graphql-core reads it with .get()."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


DEFAULTS_SDL = """
type Query {
  obj: Thing
  mapping: Thing
  dict: Thing
  objs: [Thing]
  missing: Thing
  rootTag: String
  fromContext: String
  fromRoot: String
}
type Thing {
  name: String
  size: Int
  greet(name: String = "you"): String
  upper: String
  missing: String
  callable_attr(n: Int = 1): String
  kind: String
}
"""


def _greet_dict(info: Any, name: str) -> str:
    return f"dict greets {name}"


class Root:
    rootTag = "root object"
    obj = Thing("thing", 3)
    mapping = ThingMapping({"name": "map", "size": 2, "greet": _greet_dict, "kind": "ignored"})
    dict = {"name": "dict", "size": 1, "greet": _greet_dict, "callable_attr": "plain"}
    objs = [Thing("a", 1), ThingMapping({"name": "b"}), {"name": "c"}, None]


ROOT_DICT = {"rootTag": "root dict", "obj": Thing("other", 7), "dict": {"name": "d"}}


@functools.cache
def make_defaults(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(DEFAULTS_SDL),
        style,
        {
            "Query.fromContext": lambda root, info: f"user={info.context['user']}",
            "Query.fromRoot": lambda root, info: f"root={type(info.root_value).__name__}",
            "Thing.kind": lambda thing, info: type(thing).__name__,
        },
    )


DEFAULT_CASES = [
    pytest.param(
        '{ obj { name size greet g2: greet(name: "Bo") upper missing callable_attr kind } }',
        id="object-attributes-and-methods",
    ),
    pytest.param(
        '{ mapping { name size greet(name: "x") missing kind callable_attr } }', id="mapping"
    ),
    pytest.param("{ dict { name size greet missing kind callable_attr(n: 2) } }", id="dict"),
    pytest.param("{ objs { name size kind } missing { name } }", id="mixed-sources"),
    pytest.param("{ rootTag fromContext fromRoot }", id="root-and-context"),
]


@pytest.mark.parametrize(
    "root",
    [Root(), ROOT_DICT, ThingMapping(ROOT_DICT), None],
    ids=["root-object", "root-dict", "root-mapping", "no-root"],
)
@pytest.mark.parametrize(("query", "style"), styles(*DEFAULT_CASES))
def test_default_resolver_root_and_context(query: str, style: str, root: Any) -> None:
    check(make_defaults, query, style, root=root, context={"user": "ada"})


def _custom_field_resolver(source: Any, info: Any, **args: Any) -> Any:
    if info.field_name == "obj":
        return {"kind": "from custom"}
    return f"{info.parent_type.name}.{info.field_name}{sorted(args.items())} on {source!r}"


@pytest.mark.parametrize("style", STYLES)
def test_custom_field_resolver(style: str) -> None:
    def kwargs_for(of_style: str) -> dict[str, Any]:
        return {"field_resolver": styled(_custom_field_resolver, of_style)}

    check(
        make_defaults,
        '{ rootTag obj { name greet(name: "z") kind } fromContext }',
        style,
        root="ROOT",
        context={"user": "bo"},
        kwargs_for=kwargs_for,
    )


@pytest.mark.parametrize("style", STYLES)
def test_custom_type_resolver(style: str) -> None:
    # graphql-core's type_resolver= answers for abstract types without resolve_type.
    def type_resolver(value: Any, info: Any, abstract: Any) -> Any:
        return "Movie" if "minutes" in value else "Book"

    def kwargs_for(of_style: str) -> dict[str, Any]:
        return {"type_resolver": styled_type_fn(type_resolver, of_style)}

    query = "{ media { __typename ... on Titled { title } } titled { __typename } }"
    check(make_abstract, query, style, kwargs_for=kwargs_for)


class _SizeMiddleware:
    """graphql-core middleware (an object with resolve): answers every `size` itself."""

    def resolve(self, next_: Callable[..., Any], source: Any, info: Any, **args: Any) -> Any:
        if info.field_name == "size":
            return 99
        return next_(source, info, **args)


def _greet_middleware(next_: Callable[..., Any], source: Any, info: Any, **args: Any) -> Any:
    if info.field_name == "greet":
        args["name"] = args.get("name", "?") + " (via middleware)"
    return next_(source, info, **args)


@pytest.mark.parametrize("style", STYLES)
def test_middleware(style: str) -> None:
    check(
        make_defaults,
        '{ obj { name size greet(name: "m") kind } objs { size } fromContext }',
        style,
        root=Root(),
        context={"user": "mw"},
        kwargs_for=lambda _: {"middleware": [_SizeMiddleware(), _greet_middleware]},
    )


def _noting(fn: Callable[..., Any], style: str) -> Callable[..., Any]:
    """The type function ``fn``, noting in the context (a list) the info it was given."""

    def noting(value: Any, info: Any, *rest: Any) -> Any:
        note = (fn.__name__, info.path.as_list(), info.field_name, str(info.return_type))
        info.context.append(note)
        return fn(value, info, *rest)

    return styled_type_fn(noting, style)


@functools.cache
def make_abstract_noting(style: str) -> gql.GraphQLSchema:
    schema = make_abstract.__wrapped__(style)  # a schema of its own
    schema.get_type("Pet").resolve_type = _noting(_by_kind, style)  # type: ignore[union-attr]
    schema.get_type("Named").resolve_type = _noting(_by_kind, style)  # type: ignore[union-attr]
    schema.get_type("Bird").is_type_of = _noting(_is_bird, style)  # type: ignore[union-attr]
    return schema


@pytest.mark.parametrize("style", STYLES)
def test_type_functions_get_graphql_cores_info(style: str) -> None:
    query = (
        "{ pets { __typename } named { name } firstNamed { name } bird { name } notBird { name } }"
    )
    check(make_abstract_noting, query, style, make_context=list)  # they answer the same
    document = gql.parse(query)
    notes: list[list[Any]] = []

    def args() -> tuple[Any, ...]:
        notes.append([])
        return (None, notes[-1])

    for of_style in ("plain", "async"):
        reference(of_style, make_abstract_noting(of_style), document, args())
    subject(make_abstract_noting(style), document, args)
    expected, *others = [sorted(noted, key=dumps) for noted in notes]
    assert len(expected) == 8  # 3 + 2 + 1 resolve_type calls, 2 is_type_of calls
    assert others == [expected] * 3


ASYNC_ITERABLE_SDL = "type Query { ints: [Int], broken: [Int], strict: [Int!] }"


async def _async_items(*items: Any) -> Any:
    for item in items:
        if isinstance(item, Exception):
            raise item
        yield item


@functools.cache
def make_async_iterables() -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(ASYNC_ITERABLE_SDL),
        "plain",  # the resolvers return async iterables: only asyncio execution takes them
        {
            "Query.ints": lambda root, info: _async_items(1, None, 3),
            "Query.broken": lambda root, info: _async_items(1, ValueError("stream broke")),
            "Query.strict": lambda root, info: _async_items(1, None),
        },
    )


@pytest.mark.parametrize("query", ["{ ints }", "{ ints broken }", "{ ints strict }"])
def test_async_iterable_lists(query: str) -> None:
    # graphql-core completes a list from an async iterable in its async execution only.
    document = gql.parse(query)
    schema = make_async_iterables()
    expected = reference("async", schema, document, ())
    for name, (result, _) in subject(schema, document, tuple).items():
        assert dumps(result.data) == dumps(expected.data), name
        assert in_order(errors_of(result)) == in_order(errors_of(expected)), name


# -- theme: what resolvers are told (resolve info) ----------------------------------------

INFO_SDL = """
type Query { info(x: Int): String, node: Node, nodes: [Node], strict: [Node!]!, grid: [[Node]] }
type Node { info(x: Int): String, child: Node, children: [Node] }
"""


def _describe(source: Any, info: Any, **args: Any) -> str:
    path, at = [], info.path
    while at is not None:
        path.append([at.key, at.typename])
        at = at.prev
    return dumps(
        {
            "path": path[::-1],
            "as_list": info.path.as_list(),
            "field": info.field_name,
            "parent": info.parent_type.name,
            "return": str(info.return_type),
            "nodes": [gql.print_ast(node) for node in info.field_nodes],
            "fragments": sorted(info.fragments),
            "operation": info.operation.name.value if info.operation.name else None,
            "root": info.root_value,
            "context": info.context,
            "variables": repr(info.variable_values),
            "args": args,
            "source": source,
        }
    )


@functools.cache
def make_info(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(INFO_SDL),
        style,
        {
            "Query.info": _describe,
            "Query.node": lambda root, info: {"n": 1},
            "Query.nodes": lambda root, info: [{"n": 2}, {"n": 3}],
            "Query.strict": lambda root, info: [{"n": 4}],
            "Query.grid": lambda root, info: [[{"n": 5}], [], [{"n": 6}, {"n": 7}]],
            "Node.info": _describe,
            "Node.child": lambda node, info: {"n": node["n"] * 10},
            "Node.children": lambda node, info: [{"n": node["n"] + 100}],
        },
    )


INFO_QUERY = """
query Described($x: Int) {
  info(x: $x)
  node { i: info ...F child { info(x: 2) } }
  nodes { info children { info(x: $x) } }
  strict { ...F }
  grid { info }
}
fragment F on Node { info info }
"""


@pytest.mark.parametrize("style", STYLES)
def test_resolve_info(style: str) -> None:
    check(
        make_info,
        INFO_QUERY,
        style,
        variables={"x": 5},
        root={"root": True},
        context={"ctx": 1},
    )


# -- theme: operations ----------------------------------------------------------------------

OPERATIONS_SDL = """
type Query { a: String, b: String, log: String }
type Mutation { step(n: Int!): Int, fail(n: Int!): Int, strictFail(n: Int!): Int! }
"""


def _step(root: Any, info: Any, n: int) -> int:
    info.context.append(n)
    return len(info.context) * 10 + n


def _step_fail(root: Any, info: Any, n: int) -> int:
    info.context.append(n)
    raise ValueError(f"step {n} failed")


@functools.cache
def make_operations(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(OPERATIONS_SDL),
        style,
        {
            "Query.a": lambda root, info: "a",
            "Query.b": lambda root, info: "b",
            "Query.log": lambda root, info: repr(info.context),
            "Mutation.step": _step,
            "Mutation.fail": _step_fail,
            "Mutation.strictFail": _step_fail,
        },
    )


OPERATIONS_DOC = """
query A { a log }
query B { b a }
mutation M { one: step(n: 1) two: step(n: 2) bad: fail(n: 3) three: step(n: 4) __typename }
mutation S { one: step(n: 1) bad: strictFail(n: 2) three: step(n: 3) }
"""


@pytest.mark.parametrize("name", ["A", "B", "M", "S", None, "Z"])
@pytest.mark.parametrize("style", STYLES)
def test_operation_name(style: str, name: str | None) -> None:
    # M and S run serially (a mutation): the steps see each other's side effects.
    check(make_operations, OPERATIONS_DOC, style, operation_name=name, make_context=list)


# -- theme: introspection ----------------------------------------------------------------------

THEMES = {
    "selections": make_fields,
    "lists": make_lists,
    "nonnull": make_nonnull,
    "leaves": make_leaves,
    "abstract": make_abstract,
    "defaults": make_defaults,
    "operations": make_operations,
}


@pytest.mark.parametrize("theme", list(THEMES))
@pytest.mark.parametrize(
    "query",
    [
        pytest.param(gql.get_introspection_query(), id="introspection-query"),
        pytest.param(
            gql.get_introspection_query(descriptions=False, directive_is_repeatable=True),
            id="introspection-query-options",
        ),
        pytest.param(
            '{ __schema { queryType { name } } q: __type(name: "Query") { name kind'
            " fields(includeDeprecated: true) { name args { name defaultValue } type { name kind"
            " ofType { name kind ofType { name } } } } } __typename }",
            id="type-query",
        ),
    ],
)
def test_introspection(theme: str, query: str) -> None:
    check(THEMES[theme], query, "plain")


# -- theme: a large list ----------------------------------------------------------------------

LARGE_SDL = """
type Query { items: [Item!]! }
type Item { id: ID!, name: String, owner: Owner, parts: [Part!]!, tags: [String] }
type Owner { id: Int!, name: String! }
type Part { n: Int!, label: String }
"""


@functools.cache
def make_large(style: str) -> gql.GraphQLSchema:
    return attach(
        gql.build_schema(LARGE_SDL),
        style,
        {
            "Query.items": lambda root, info: [
                {"id": i, "name": f"item {i}", "tags": ["t", str(i % 3)]} for i in range(1000)
            ],
            "Item.owner": lambda item, info: {"id": item["id"] % 50, "name": f"o{item['id'] % 50}"},
            "Item.parts": lambda item, info: [{"n": n} for n in range(item["id"] % 4)],
            "Part.label": lambda part, info: f"part {part['n']}",
        },
    )


@pytest.mark.parametrize("style", STYLES)
def test_large_list(style: str) -> None:
    query = "{ items { id name tags owner { id name } parts { n label } } }"
    recorders = check(make_large, query, style)
    if style == "future":
        for rec in recorders.values():
            # One batch per level: the list, then 1,000 owners and parts together,
            # then the labels of every part.
            parts = sum(i % 4 for i in range(1000))
            assert [len(keys) for keys in rec.calls(unbox)] == [1, 2000, parts]


# -- theme: batchy loaders (per-key errors, failed batches, one batch per level) --------------

PEOPLE_SDL = """
type Query {
  person(id: Int!): Person
  people(ids: [Int!]!): [Person]
  strictPeople(ids: [Int!]!): [Person!]
  down(ids: [Int!]!): [Person]
  strictDown(id: Int!): Person!
}
type Person {
  id: Int!
  name: String!
  friends: [Person]
  strictFriends: [Person!]!
  best: Person
  boss: Person!
  coworkers: [Person]
}
"""

PEOPLE: dict[int, dict[str, Any]] = {
    1: {"id": 1, "name": "Ada", "friends": [4, 5], "best": 2, "boss": 3},
    2: {"id": 2, "name": "Bob", "friends": [5, 6], "best": 1, "boss": 3},
    3: {"id": 3, "name": "Cy", "friends": [], "best": None, "boss": 3},
    4: {"id": 4, "name": "Di", "friends": [1], "best": 99, "boss": 98},
    5: {"id": 5, "name": "Ed", "friends": [99, 2], "best": 4, "boss": 1},
    6: {"id": 6, "name": "Flo", "friends": [], "best": None, "boss": 2},
}
DOWN = "people store is down"


def person_value(pid: int) -> Any:
    """A person, or the per-key error of a missing one."""
    return PEOPLE[pid] if pid in PEOPLE else LookupError(f"no person {pid}")


@batchy.batched
async def people_by_id(ids: list[int]) -> list[Any]:
    return [person_value(i) for i in ids]


@batchy.batched
def people_down(ids: list[int]) -> list[Any]:
    raise ConnectionError(DOWN)


def _person_gen(pid: int) -> Any:
    person = yield people_by_id(pid)
    return person


async def _person_async(pid: int) -> Any:
    return person_value(pid)


async def _person_await(pid: int) -> Any:
    return await people_by_id(pid)


async def _down_async(pid: int) -> Any:
    return ConnectionError(DOWN)


async def _down_await(pid: int) -> Any:
    return await people_down(pid)


def _down_gen(pid: int) -> Any:
    person = yield people_down(pid)
    return person


ONE = {
    "plain": person_value,
    "async": _person_async,
    "future": people_by_id,
    "generator": _person_gen,
    "await": _person_await,
}
ONE_DOWN = {
    "plain": lambda pid: ConnectionError(DOWN),
    "async": _down_async,
    "future": people_down,
    "generator": _down_gen,
    "await": _down_await,
}
LOADER_STYLES = ("future", "generator", "await")


@functools.cache
def make_people(style: str) -> gql.GraphQLSchema:
    one, down = ONE[style], ONE_DOWN[style]

    def person(root: Any, info: Any, id: int) -> Any:
        return one(id)

    def person_generator(root: Any, info: Any, id: int) -> Any:
        found = yield people_by_id(id)  # a generator resolver
        return found

    schema = gql.build_schema(PEOPLE_SDL)
    resolvers: dict[str, Callable[..., Any]] = {
        "Query.person": person_generator if style == "generator" else person,
        "Query.people": lambda root, info, ids: [one(i) for i in ids],
        "Query.strictPeople": lambda root, info, ids: [one(i) for i in ids],
        "Query.down": lambda root, info, ids: [down(i) for i in ids],
        "Query.strictDown": lambda root, info, id: down(id),
        "Person.friends": lambda p, info: [one(i) for i in p["friends"]],
        "Person.strictFriends": lambda p, info: [one(i) for i in p["friends"]],
        "Person.best": lambda p, info: None if p["best"] is None else one(p["best"]),
        "Person.boss": lambda p, info: one(p["boss"]),
        "Person.coworkers": lambda p, info: [down(i) for i in p["friends"]],
    }
    for where, fn in resolvers.items():
        type_name, field_name = where.split(".")
        schema.get_type(type_name).fields[field_name].resolve = fn  # type: ignore[union-attr]
    return schema


PEOPLE_CASES = [
    pytest.param(
        "{ people(ids: [1, 2, 3]) { name friends { name } } }",
        [[1, 2, 3], [4, 5, 6]],
        id="one-batch-per-level",
    ),
    pytest.param(
        "{ a: person(id: 1) { name } b: person(id: 1) { id best { name } } }",
        [[1], [2]],
        id="same-key-loaded-once",
    ),
    pytest.param("{ people(ids: [1, 99, 2]) { name } }", [[1, 2, 99]], id="per-key-error"),
    pytest.param(
        "{ person(id: 4) { name best { name } } }", [[4], [99]], id="per-key-error-nested"
    ),
    pytest.param(
        "{ strictPeople(ids: [1, 99]) { name } }", [[1, 99]], id="per-key-error-nulls-list"
    ),
    pytest.param(
        "{ person(id: 4) { name boss { name } } }", [[4], [98]], id="per-key-error-nulls-parent"
    ),
    pytest.param(
        "{ person(id: 5) { strictFriends { name } friends { name } } }",
        [[5], [2, 99]],
        id="per-key-error-in-non-null-list",
    ),
    pytest.param(
        "{ person(id: 1) { friends { name friends { name best { name } } } } }",
        [[1], [4, 5], [2, 99]],
        id="deep",
    ),
    pytest.param("{ down(ids: [1, 2, 3]) { name } }", None, id="failed-batch"),
    pytest.param(
        "{ person(id: 1) { name coworkers { name } best { name } } }",
        [[1], [2]],
        id="failed-batch-nested",
    ),
    pytest.param(
        "{ a: person(id: 2) { name } strictDown(id: 1) { name } }", [[2]], id="failed-batch-data"
    ),
]


@pytest.mark.parametrize("style", ["plain", "async", *LOADER_STYLES])
@pytest.mark.parametrize(("query", "calls"), PEOPLE_CASES)
def test_batchy_loaders(query: str, calls: list[list[int]] | None, style: str) -> None:
    # Expected answers come from the plain and async versions run by graphql-core;
    # a failed batch's error is batchy's LoaderError, whose message says more.
    # The case whose errors race: strictFriends' error nulls the person that
    # friends' error is below (graphql-core's sync run never resolves friends).
    # This theme's loaders are batchy's own: no DataLoader reference for them.
    race = "strictFriends" in query
    lenient = race and style in LOADER_STYLES
    recorders = check(make_people, query, style, loader_messages=True, race=race, lenient=lenient)
    if style in LOADER_STYLES:
        for rec in recorders.values():
            if calls is not None:
                # One call per level; the order of keys inside a call is not the point.
                assert [sorted(keys) for keys in rec.calls(people_by_id)] == calls
            if "down" in query or "coworkers" in query:
                assert len(rec.calls(people_down)) == 1  # the whole batch failed at once


# -- issue 14 §1: the corners ---------------------------------------------------------------
#
# Each case below differed from graphql-core before issue 14 §1 was fixed.

import threading  # noqa: E402
import time  # noqa: E402

CORNERS_SDL = """
type Query { obj: Obj, other: Obj, hello: String }
type Obj { a: Boolean!, b: String, k: String, inner: Obj }
"""


class _Never:
    """Work that never finishes unless cancelled: records that it was."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    async def wait(self) -> str:
        self.started += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "never"  # pragma: no cover


def _raise_a(source: Any, info: Any) -> Any:
    raise ValueError("a failed")


async def _raise_a_async(source: Any, info: Any) -> Any:
    raise ValueError("a failed")


def make_bubbling(a_style: str, b_style: str, never: _Never) -> gql.GraphQLSchema:
    schema = gql.build_schema(CORNERS_SDL)
    resolvers: dict[str, Callable[..., Any]] = {"Query.obj": lambda root, info: {}}
    resolvers["Obj.a"] = _raise_a_async if a_style == "async" else _raise_a
    resolvers["Obj.inner"] = lambda source, info: {}
    if b_style == "async":

        async def b(source: Any, info: Any) -> Any:
            return await never.wait()

    else:

        @batchy.task
        async def b_task(source: Any) -> Any:
            return await never.wait()

        def b(source: Any, info: Any) -> Any:
            return b_task(source)

    resolvers["Obj.b"] = b
    for where, fn in resolvers.items():
        type_name, field_name = where.split(".")
        schema.get_type(type_name).fields[field_name].resolve = fn  # type: ignore[union-attr]
    return schema


def _in_thread(fn: Callable[[], Any], timeout: float) -> Any:
    # A run that never ends must fail the test, not hang it.
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert box, f"no response within {timeout} s"
    return box[0]


@pytest.mark.parametrize("b_style", ["async", "task"])
@pytest.mark.parametrize("a_style", ["sync", "async"])
@pytest.mark.parametrize(
    "query", ["{ obj { b a } }", "{ obj { a b } }", "{ obj { inner { b } a } }"]
)
def test_a_null_bubbling_up_does_not_wait_for_its_siblings(
    query: str, a_style: str, b_style: str
) -> None:
    document = gql.parse(query)
    reference_never = _Never()
    with warnings.catch_warnings():
        # graphql-core closes the coroutines of the fields it abandons, unawaited.
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        expected = asyncio.run(
            asyncio.wait_for(
                _resolved(gql.execute(make_bubbling(a_style, "async", reference_never), document)),
                2,
            )
        )
        gc.collect()
    assert expected.data == {"obj": None}
    never = _Never()
    schema = make_bubbling(a_style, b_style, never)

    async def run_async() -> gql.ExecutionResult:
        return await asyncio.wait_for(bgql.execute(schema, document), 2)

    started = time.monotonic()
    for name, result in [
        ("execute", asyncio.run(run_async())),
        ("execute_sync", _in_thread(lambda: bgql.execute_sync(schema, document), 2)),
    ]:
        assert dumps(result.data) == dumps(expected.data), name
        assert errors_of(result) == errors_of(expected), name
    assert time.monotonic() - started < 2
    # The abandoned work was cancelled, as graphql-core 3.3 cancels it.
    assert never.cancelled == never.started


def test_a_load_shared_by_a_nulled_position_and_a_live_one_completes_the_live_one() -> None:
    @batchy.batched
    async def shared(keys: list[str]) -> list[str]:
        await asyncio.sleep(0.01)
        return [f"v{key}" for key in keys]

    def k_generator(source: Any, info: Any) -> Any:
        return (yield shared("1"))

    def make(style: str) -> gql.GraphQLSchema:
        schema = gql.build_schema(CORNERS_SDL)
        obj = schema.get_type("Obj")
        assert isinstance(obj, gql.GraphQLObjectType) and schema.query_type is not None
        schema.query_type.fields["obj"].resolve = lambda root, info: {}
        schema.query_type.fields["other"].resolve = lambda root, info: {}
        obj.fields["a"].resolve = _raise_a
        if style == "plain":
            obj.fields["k"].resolve = lambda source, info: "v1"
        elif style == "future":
            obj.fields["k"].resolve = lambda source, info: shared("1")
        else:
            obj.fields["k"].resolve = k_generator
        return schema

    document = gql.parse("{ obj { k a } other { k } }")
    expected = gql.execute_sync(make("plain"), document)
    assert expected.data == {"obj": None, "other": {"k": "v1"}}
    for style in ("future", "generator"):
        for name, (result, rec) in subject(make(style), document, tuple).items():
            where = f"{name} ({style})"
            assert dumps(result.data) == dumps(expected.data), where
            assert errors_of(result) == errors_of(expected), where
            assert rec.calls(shared) == [["1"]], where


# graphql()/graphql_sync(): every option graphql-core's own takes, with a query
# that shows it working; an option the installed line does not know is a TypeError.
_OPTION_CASES: list[tuple[str, Any, str]] = [
    ("no_location", True, "{ helo }"),
    ("max_tokens", 3, "{ hello hello hello }"),
    ("max_lexical_tokens", 3, "{ hello hello hello }"),
    ("max_comments", 0, "# a comment\n{ hello }"),
    ("max_source_length", 5, "{ hello }"),
    ("rules", [], "{ helo hello }"),
    ("max_errors", 1, "{ a b c }"),
    ("hide_suggestions", True, "{ helo }"),
    ("experimental_fragment_arguments", True, "{ hello }"),
    ("abort_signal", None, "{ hello }"),
    ("is_awaitable", None, "{ hello }"),
    ("is_async_iterable", None, "{ hello }"),
    ("check_sync", True, "{ hello }"),
    ("no_such_option", 1, "{ hello }"),
]


@functools.cache
def make_hello() -> gql.GraphQLSchema:
    schema = gql.build_schema(CORNERS_SDL)
    assert schema.query_type is not None
    schema.query_type.fields["hello"].resolve = lambda root, info: "world"
    return schema


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        result = call()
    except TypeError as error:
        return ("TypeError", str(error).split("()")[-1])
    return (dumps(result.data), errors_of(result))


@pytest.mark.parametrize("sync", [True, False], ids=["graphql_sync", "graphql"])
@pytest.mark.parametrize(("option", "value", "query"), _OPTION_CASES)
def test_graphql_takes_graphql_cores_options(
    sync: bool, option: str, value: Any, query: str
) -> None:
    schema = make_hello()
    kwargs = {option: value}
    if sync:
        expected = _outcome(lambda: gql.graphql_sync(schema, query, **kwargs))
        got = _outcome(lambda: bgql.graphql_sync(schema, query, **kwargs))
    else:
        expected = _outcome(lambda: asyncio.run(gql.graphql(schema, query, **kwargs)))
        got = _outcome(lambda: asyncio.run(bgql.graphql(schema, query, **kwargs)))
    assert got == expected


# A custom execution context class that overrides one of graphql-core's hooks:
# batchy must run the override as graphql-core does.


def _path_of(args: tuple[Any, ...]) -> Any:
    return next(arg for arg in args if isinstance(arg, gql.pyutils.Path))


_CORE_CLASS: Any = getattr(
    gql.execution, "Executor" if bgql.GRAPHQL_CORE_33 else "ExecutionContext"
)


class _RedactingContext(_CORE_CLASS):  # type: ignore[misc,valid-type]
    def execute_field(self, parent_type: Any, source: Any, *rest: Any) -> Any:
        if _path_of(rest).key == "secret":
            return "redacted"
        return super().execute_field(parent_type, source, *rest)


class _ShoutingContext(_CORE_CLASS):  # type: ignore[misc,valid-type]
    def complete_value(
        self, return_type: Any, nodes: Any, info: Any, path: Any, result: Any, *rest: Any
    ) -> Any:
        if isinstance(result, str):
            result = result.upper()
        return super().complete_value(return_type, nodes, info, path, result, *rest)


@pytest.mark.parametrize("cls", [_RedactingContext, _ShoutingContext])
@pytest.mark.parametrize("style", [s for s in STYLES if s not in ("plain", "async")])
def test_hooks_of_a_custom_execution_context_are_honoured(style: str, cls: type[Any]) -> None:
    name = "executor_class" if bgql.GRAPHQL_CORE_33 else "execution_context_class"
    check(
        make_fields,
        "{ me { name secret: name age } greet }",
        style,
        kwargs_for=lambda s: (
            {name: cls}
            if s in ("plain", "async")
            else {"execution_context_class": bgql.with_batchy(cls)}
        ),
    )


def test_a_fragment_cycle_in_an_unvalidated_document_ends_like_graphql_core() -> None:
    # graphql-core ends on a RecursionError, at a depth that depends on its stack;
    # batchy must end too, with the same kind of error, nulling a position the same way.
    document = gql.parse("{ me { ...F } } fragment F on User { name bestFriend { ...F } }")
    schema = make_fields("plain")
    expected = gql.execute_sync(schema, document)
    ((message, _, _),) = errors_of(expected)
    assert message.startswith("maximum recursion depth exceeded")
    for style in ("plain", "future", "generator"):
        schema = make_fields(style)
        for name, result in [
            ("execute_sync", _in_thread(lambda: bgql.execute_sync(schema, document), 10)),
            ("execute", asyncio.run(asyncio.wait_for(bgql.execute(schema, document), 10))),
        ]:
            ((got_message, got_path, _),) = errors_of(result)
            assert got_message.startswith("maximum recursion depth exceeded"), (name, style)
            assert set(got_path[1:]) == {"bestFriend"}, (name, style)


async def test_execute_starts_work_when_called_like_graphql_core() -> None:
    def make(calls: list[str]) -> gql.GraphQLSchema:
        schema = gql.build_schema(CORNERS_SDL)
        assert schema.query_type is not None

        def hello(root: Any, info: Any) -> Any:
            calls.append("hello")
            return unbox(Box("world"))

        schema.query_type.fields["hello"].resolve = hello
        return schema

    document = gql.parse("{ hello }")
    core_calls: list[str] = []
    pending = gql.execute(make(core_calls), document)
    assert core_calls == ["hello"]  # graphql-core calls the root resolvers at once
    await _resolved(pending)
    calls: list[str] = []
    started = bgql.execute(make(calls), document)
    assert calls == core_calls
    result = await started
    assert result.data == {"hello": "world"}


# Lists from async iterables (issue 14 §1, bullet 4). graphql-core 3.3 asks its
# is_async_iterable predicate first and reads one item at a time, completing
# each as it comes; 3.2 reads anything iterable as a list, and an async
# iterable all at once, then completes it.


class _Both:
    """Iterable and async-iterable at once, as a Django QuerySet is."""

    def __iter__(self) -> Iterator[int]:
        return iter([1, 2])

    def __aiter__(self) -> Any:
        return _async_items(10, 20)


class _Stream:
    """An async iterator (not a generator: no loop hook closes it) that records aclose()."""

    def __init__(self, *items: Any) -> None:
        self.items = list(items)
        self.closed = 0

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Any:
        if not self.items:
            raise StopAsyncIteration
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed += 1


def make_streams(streams: list[_Stream]) -> gql.GraphQLSchema:
    def stream(*items: Any) -> Callable[..., Any]:
        def resolve(root: Any, info: Any) -> Any:
            streams.append(_Stream(*items))
            return streams[-1]

        return resolve

    return attach(
        gql.build_schema(ASYNC_ITERABLE_SDL),
        "plain",
        {
            "Query.ints": lambda root, info: _Both(),
            # The second item nulls the list; the third would fail the iterator.
            "Query.strict": stream(1, None, ValueError("the stream broke later")),
            "Query.broken": stream(1, ValueError("the stream broke")),
        },
    )


@pytest.mark.parametrize("query", ["{ ints }", "{ strict ints }", "{ broken }"])
def test_async_iterables_are_read_and_closed_as_graphql_core_does(query: str) -> None:
    document = gql.parse(query)
    core_streams: list[_Stream] = []
    expected = reference("async", make_streams(core_streams), document, ())
    streams: list[_Stream] = []
    for name, (result, _) in subject(make_streams(streams), document, tuple).items():
        assert dumps(result.data) == dumps(expected.data), name
        assert in_order(errors_of(result)) == in_order(errors_of(expected)), name
    # Each run closed its iterators as graphql-core closed its own.
    assert [s.closed for s in streams] == [s.closed for s in core_streams] * 2


@pytest.mark.skipif(not bgql.GRAPHQL_CORE_33, reason="is_async_iterable= is graphql-core 3.3's")
@pytest.mark.parametrize(
    ("query", "says"),
    [("{ ints }", False), ("{ broken }", False), ("{ ints }", True)],
    ids=["both-read-sync", "async-only-refused", "both-read-async"],
)
def test_a_custom_is_async_iterable_decides_as_in_graphql_core(query: str, says: bool) -> None:
    document = gql.parse(query)

    def predicate(value: Any) -> bool:
        return says and hasattr(value, "__aiter__")

    expected = reference("async", make_streams([]), document, (), is_async_iterable=predicate)
    runs = subject(make_streams([]), document, tuple, is_async_iterable=predicate)
    for name, (result, _) in runs.items():
        assert dumps(result.data) == dumps(expected.data), name
        assert in_order(errors_of(result)) == in_order(errors_of(expected)), name


# -- property: a race is decided as graphql-core decides it ----------------------------------
#
# Random queries over one recursive type, where any field may fail and non-null
# positions are everywhere, so errors race to null the same position often. In
# the plain and async styles batchy must keep exactly what execute_sync keeps
# (async resolvers run at once, up to their first wait). In the loader styles
# graphql-core's pick depends on its task queue when two errors arrive in one
# round at different depths (see test_non_null_propagation): there the data and
# the nulled positions must agree.

RACE_SDL = """
type Query { node: Node }
type Node {
  ok: String
  fail: String
  failStrict: String!
  node: Node
  nodeStrict: Node!
  list: [Node!]
  listStrict: [Node!]!
}
"""


@functools.cache
def make_race(style: str) -> gql.GraphQLSchema:
    two = lambda source, info: [{}, {}]  # noqa: E731
    return attach(
        gql.build_schema(RACE_SDL),
        style,
        {
            "Query.node": lambda root, info: {},
            "Node.ok": lambda source, info: "ok",
            "Node.fail": _fail,
            "Node.failStrict": _fail,
            "Node.node": lambda source, info: {},
            "Node.nodeStrict": lambda source, info: {},
            "Node.list": two,
            "Node.listStrict": two,
        },
    )


def _selections(depth: int) -> st.SearchStrategy[list[Any]]:
    leaf = st.sampled_from(["ok", "fail", "failStrict"])
    if depth == 0:
        return st.lists(leaf, min_size=1, max_size=3)
    inner = st.tuples(
        st.sampled_from(["node", "nodeStrict", "list", "listStrict"]), _selections(depth - 1)
    )
    return st.lists(st.one_of(leaf, inner), min_size=1, max_size=4)


def _render(selections: list[Any]) -> str:
    parts = []
    for index, selection in enumerate(selections):
        if isinstance(selection, str):
            parts.append(f"f{index}: {selection}")
        else:
            name, inner = selection
            parts.append(f"f{index}: {name} {_render(inner)}")
    return "{ " + " ".join(parts) + " }"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selections=_selections(3), style=st.sampled_from(STYLES))
def test_races_are_decided_as_graphql_core_decides_them(selections: list[Any], style: str) -> None:
    query = "{ node " + _render(selections) + " }"
    check(make_race, query, style, race=True, lenient=style in DL_STYLE, collect=True)
