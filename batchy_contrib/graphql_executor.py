"""The planned executor: runs a GraphQL operation as one batchy handler, from per-selection plans.

graphql-core executes field by field: for every field of every object it looks
up the field definition, builds a resolve info, coerces the arguments, creates a
path and walks ``complete_value``'s chain of type checks; and in async execution
every awaitable field becomes a coroutine and every object and list an
``asyncio.gather``. On a feed of 50 posts with 20 comments that costs more than
the data.

Here the work that does not depend on the value is done once per *selection*
(an object type and the field nodes asking for it), as graphql-jit does for
graphql-js: a :class:`Field` holds the definition, the resolver, the coerced
arguments and the :class:`Type` that completes its value. A field answered by the
default resolver from a ``dict`` with a ``String`` or ``ID`` costs a dict look-up
and a type check. Paths and resolve infos are made only where they are read:
for resolvers of our own, for positions that hold objects or lists, for errors.

A value that is not there yet (a loader future, a batchy task, a generator
resolver, an ``async def`` resolver) leaves its position empty and goes into a
:class:`batchy.Watch`, with where it belongs. The handler running the operation
completes every position it can, then waits until any watched value is done and
completes that one, so its loads join the round in which it became ready, and a
slow loader holds back only the positions that wait for it.

Errors follow the spec as graphql-core applies it: a field error nulls the field
and is reported with its path; in a non-null position it nulls the nearest
nullable position above, which may be an object completed long before (each
object and list keeps a :class:`_Pos` that links it to its parent for that);
errors below a position that was nulled are dropped, as graphql-core 3.3 does.

The executor borrows from graphql-core what is not per value: field collection
(fragments, ``@skip``/``@include``), argument coercion, resolve infos, type
resolution, leaf serialization. The plans and the differences between the two
graphql-core lines live in ``_graphql_plan``.

At about 500 lines this module is longer than most of ours: completing values,
tracking nulled positions and the watch loop all work on one :class:`_Run`, and
split across modules they would only hand its state back and forth.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from graphql import GraphQLError, Undefined, located_error
from graphql.pyutils import Path, is_iterable

import batchy

from ._graphql_pending import Pending, own_awaitable, own_task, read_all
from ._graphql_plan import (
    GRAPHQL_CORE_33,
    LEAF,
    LIST,
    OBJECT,
    Field,
    Planner,
    Type,
    has_fragment_cycle,
)
from .graphql_async import is_handler, run_generator

__all__ = ["execute_planned"]

# Values that are what they are: never pending, never callables.
_LEAF_VALUES = frozenset({str, int, float, bool})


class _Pos:
    """A position holding an object or a list: where it is, and whether it may be nulled."""

    __slots__ = (
        "container",
        "depth",
        "field_path",
        "key",
        "nullable",
        "parent",
        "path",
        "typename",
    )

    def __init__(
        self,
        parent: _Pos | None,
        container: Any,
        key: Any,
        nullable: bool,
        path: Path | None,
        typename: str | None,
        field_path: Path | None,
    ) -> None:
        self.parent = parent
        self.container = container
        self.key = key
        self.nullable = nullable
        self.path = path
        # The parent type of the fields inside (None in a list: its keys are indexes).
        self.typename = typename
        # In a list: the path of the field the list belongs to (its items' info.path).
        self.field_path = field_path
        self.depth: int = 0 if parent is None else parent.depth + 1


# Work waiting in the watch: how to go on, the position's type, field,
# container, key and _Pos, and what else going on needs.
_Slot = tuple[Any, Type, Field, Any, Any, _Pos, tuple[Any, ...]]


class _Run:
    """One execution of one operation (a graphql-core execution context does the rest)."""

    def __init__(self, ctx: Any, max_depth: int | None) -> None:
        self.ctx = ctx
        self.plan = Planner(ctx)
        self.info = self.plan.info
        self.type_resolver = ctx.type_resolver
        # Positions nulled by an error: (id(container), key). Work still waiting
        # below one of them is dropped, and so are its errors.
        self.nulled: set[tuple[int, Any]] = set()
        self.pending = Pending()
        self.add = self.pending.add
        # Set when a position is nulled: drop the slots below it before waiting.
        self.sweep = False
        # Only a document with a fragment cycle can nest without end; see run().
        self.max_depth = max_depth
        self.data: dict[str, Any] | None = None

    # -- completing -----------------------------------------------------------------

    def object(
        self, fields: list[Field], source: Any, pos: _Pos, result: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Complete one object: resolve and complete every field; defer what is pending."""
        if result is None:
            result = {}
        for field in fields:
            key = field.key
            try:
                resolve = field.resolve
                if resolve is None:
                    if type(source) is dict or isinstance(source, Mapping):
                        value = source.get(field.name)
                    else:
                        value = getattr(source, field.name, None)
                    if type(value) not in _LEAF_VALUES and callable(value):
                        path = Path(pos.path, key, pos.typename)
                        value = value(self.info(field, path), **field.args)
                else:
                    path = Path(pos.path, key, pos.typename)
                    value = resolve(source, self.info(field, path), **field.args)
                ftype = field.type
                if type(value) in ftype.as_is:
                    result[key] = value  # the common leaf: a str for a String
                else:
                    result[key] = self.complete(ftype, field, value, result, key, pos)
            except Exception as error:
                self.field_error(error, field.type, field, result, key, pos)
                result[key] = None
        return result

    def complete(
        self, ftype: Type, field: Field, value: Any, container: Any, key: Any, pos: _Pos
    ) -> Any:
        """The completed value for position ``container[key]`` (inside ``pos``).

        Returns None for a position left to fill later; raises a field error.
        """
        if type(value) in _LEAF_VALUES:
            if ftype.kind == LEAF:
                return value if type(value) in ftype.as_is else self.leaf(ftype, value)
        elif value is None or value is Undefined:
            if ftype.non_null:
                raise TypeError(
                    f"Cannot return null for non-nullable field {field.parent_name}.{field.name}."
                )
            return None
        elif isinstance(value, Exception):
            raise value
        else:
            pending = _pending(value, field)
            if pending is not None:
                fut, inner = pending
                if fut.done():  # a key loaded earlier in this scope
                    return self.complete(ftype, field, fut.result(), container, key, pos)
                self.add(fut, (self.resume, ftype, field, container, key, pos, ()), inner)
                return None
        kind = ftype.kind
        if kind == LEAF:
            return self.leaf(ftype, value)
        if kind == LIST:
            return self.list(ftype, field, value, container, key, pos)
        if kind == OBJECT:
            object_type = ftype.type
        else:
            object_type = self.runtime_type(ftype, field, value, container, key, pos)
            if object_type is None:
                return None  # the type resolver is pending
        return self.object_value(object_type, ftype, field, value, container, key, pos)

    def leaf(self, ftype: Type, value: Any) -> Any:
        return self.ctx.complete_leaf_value(ftype.type, value)

    def child_pos(
        self, ftype: Type, container: Any, key: Any, pos: _Pos, typename: str | None
    ) -> _Pos:
        path = Path(pos.path, key, pos.typename)
        # Items of a list keep the field's path in their info; a field's own path is its.
        field_path = pos.field_path if pos.typename is None else path
        child = _Pos(pos, container, key, not ftype.non_null, path, typename, field_path)
        if self.max_depth is not None and child.depth > self.max_depth:
            # graphql-core's recursion ends here, on its stack's limit.
            raise RecursionError("maximum recursion depth exceeded")
        return child

    def info_path(self, pos: _Pos, key: Any) -> Path:
        return pos.field_path if pos.typename is None else Path(pos.path, key, pos.typename)  # type: ignore[return-value]

    def object_value(
        self,
        object_type: Any,
        ftype: Type,
        field: Field,
        value: Any,
        container: Any,
        key: Any,
        pos: _Pos,
    ) -> Any:
        if object_type.is_type_of:
            matches = object_type.is_type_of(value, self.info(field, self.info_path(pos, key)))
            if inspect.isawaitable(matches):
                then = (
                    self.resume_is_type_of,
                    ftype,
                    field,
                    container,
                    key,
                    pos,
                    (object_type, value),
                )
                self.add(own_awaitable(matches), then, matches)
                return None
            if not matches:
                raise self.plan.invalid_return_type_error(ftype, object_type, value)
        fields = self.plan.subfields(ftype, object_type)
        return self.object(
            fields, value, self.child_pos(ftype, container, key, pos, object_type.name)
        )

    def runtime_type(
        self, ftype: Type, field: Field, value: Any, container: Any, key: Any, pos: _Pos
    ) -> Any:
        abstract = ftype.type
        resolve_type = abstract.resolve_type or self.type_resolver
        info = self.info(field, self.info_path(pos, key))
        name = resolve_type(value, info, abstract)
        if inspect.isawaitable(name):
            then = (self.resume_runtime_type, ftype, field, container, key, pos, (value,))
            self.add(own_awaitable(name), then, name)
            return None
        return self.ctx.ensure_valid_runtime_type(name, abstract, ftype.core_nodes, info, value)

    def list(
        self, ftype: Type, field: Field, value: Any, container: Any, key: Any, pos: _Pos
    ) -> Any:
        if not _is_iterable(value):
            if hasattr(value, "__aiter__"):
                then = (self.resume, ftype, field, container, key, pos, ())
                self.add(read_all(value), then, None)
                return None
            raise GraphQLError(
                "Expected Iterable, but did not find one for field"
                f" '{field.parent_name}.{field.name}'."
            )
        item: Type = ftype.item  # type: ignore[assignment]
        as_is = item.as_is
        result: list[Any] = []
        own = self.child_pos(ftype, container, key, pos, None)
        for index, element in enumerate(value):
            if type(element) in as_is:
                result.append(element)
                continue
            try:
                result.append(self.complete(item, field, element, result, index, own))
            except Exception as error:
                self.field_error(error, item, field, result, index, own)
                result.append(None)
        return result

    # -- going on when a value is there --------------------------------------------------

    def resume(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: _Pos,
        extra: tuple[Any, ...],
    ) -> None:
        container[key] = self.complete(ftype, field, fut.result(), container, key, pos)

    def resume_runtime_type(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: _Pos,
        extra: tuple[Any, ...],
    ) -> None:
        (value,) = extra
        info = self.info(field, self.info_path(pos, key))
        object_type = self.ctx.ensure_valid_runtime_type(
            fut.result(), ftype.type, ftype.core_nodes, info, value
        )
        container[key] = self.object_value(object_type, ftype, field, value, container, key, pos)

    def resume_is_type_of(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: _Pos,
        extra: tuple[Any, ...],
    ) -> None:
        object_type, value = extra
        if not fut.result():
            raise self.plan.invalid_return_type_error(ftype, object_type, value)
        fields = self.plan.subfields(ftype, object_type)
        child = self.child_pos(ftype, container, key, pos, object_type.name)
        container[key] = self.object(fields, value, child)

    # -- errors ---------------------------------------------------------------------

    def field_error(
        self, error: Exception, ftype: Type, field: Field, container: Any, key: Any, pos: _Pos
    ) -> None:
        """An error at ``container[key]`` (in ``pos``): null it, or raise it to the parent."""
        path = Path(pos.path, key, pos.typename)
        located = located_error(error, field.nodes, path.as_list())
        if ftype.non_null and self.plan.propagate:
            raise located
        self.plan.add_error(located, path)
        if ftype.kind != LEAF:
            self.null(container, key)

    def null(self, container: Any, key: Any) -> None:
        """Mark ``container[key]`` nulled: the work still waiting below it is abandoned."""
        self.nulled.add((id(container), key))
        self.sweep = True

    def is_dropped(self, pos: _Pos | None) -> bool:
        """True if a position at or above ``pos`` was nulled: its waiting work is void."""
        nulled = self.nulled
        if not nulled:
            return False
        while pos is not None:
            if (id(pos.container), pos.key) in nulled:
                return True
            pos = pos.parent
        return False

    def pending_error(
        self, error: Exception, ftype: Type, field: Field, container: Any, key: Any, pos: _Pos
    ) -> None:
        """A waiting position failed: null it, or the nearest nullable position above."""
        path = Path(pos.path, key, pos.typename)
        located = located_error(error, field.nodes, path.as_list())
        if not ftype.non_null or not self.plan.propagate:
            container[key] = None
            self.plan.add_error(located, path)
            self.null(container, key)
            return
        at = pos
        while at.parent is not None:
            if at.nullable:
                at.container[at.key] = None
                self.plan.add_error(located, at.path)
                self.null(at.container, at.key)
                return
            at = at.parent
        # No nullable position up to the root: the whole data is null.
        self.plan.add_error(located, None)
        self.data = None
        self.null(None, None)

    # -- the handler ----------------------------------------------------------------

    def start(
        self, root_type: Any, root_value: Any, grouped: Mapping[str, Any], serially: bool
    ) -> Any:
        """Run what graphql-core runs before its first await: the data, or a task for it.

        The root fields are resolved in this call, as graphql-core resolves them;
        if any value is pending, the task returned completes the data.
        """
        root = _Pos(None, None, None, False, None, root_type.name, None)
        fields = self.plan.fields(grouped, root_type)
        try:
            if serially:
                # A mutation: each root field, with all it waits for, before the next.
                data: dict[str, Any] = {}
                self.data = data
                for index, field in enumerate(fields):
                    self.object([field], root_value, root, data)
                    if self.pending.slots:
                        return _finish(self, fields[index + 1 :], root_value, root)
            else:
                self.data = self.object(fields, root_value, root)
                if self.pending.slots:
                    return _finish(self, [], root_value, root)
        except GraphQLError as error:
            # A non-null root field failed: no data at all.
            self.pending.cancel_all()
            self.plan.add_error(error, None)
            return None
        return self.data

    def finish(
        self, rest: Sequence[Field], root_value: Any, root: _Pos
    ) -> Generator[Any, Any, Any]:
        """The handler: completes what start() left waiting, then the mutation's other fields."""
        self.pending.start()
        try:
            yield from self.drain()
            data = self.data
            for field in rest:
                if data is None:
                    break
                self.object([field], root_value, root, data)
                yield from self.drain()
                data = self.data
        except GraphQLError as error:
            self.plan.add_error(error, None)
            return None
        finally:
            # Work under a null that nothing waits for any more; or we were cancelled.
            self.pending.cancel_all()
        return self.data

    def drain(self) -> Generator[Any, Any, None]:
        """Go on with each waiting position as its value arrives, until none waits."""
        pending = self.pending
        while pending.slots:
            if self.sweep:
                # Positions were nulled: stop waiting for the work below them.
                self.sweep = False
                pending.drop(self.slot_dropped)
                if not pending.slots:
                    return
            for slot, fut in (yield from pending.taken()):
                resume, ftype, field, container, key, pos, extra = slot
                if self.nulled and self.slot_dropped(slot):
                    continue
                try:
                    resume(fut, ftype, field, container, key, pos, extra)
                except Exception as error:
                    self.pending_error(error, ftype, field, container, key, pos)
                    if self.data is None:
                        return

    def slot_dropped(self, slot: _Slot) -> bool:
        """True if the slot's position, or one above it, was nulled."""
        return (id(slot[3]), slot[4]) in self.nulled or self.is_dropped(slot[5])


def _is_iterable(value: Any) -> bool:
    return type(value) is list or is_iterable(value)


def _pending(value: Any, field: Field) -> tuple[batchy.Future[Any], Any] | None:
    """The future to wait on when ``value`` is not there yet, and what it runs if it is ours.

    (False when others may share it: see ``Pending.add``.)
    """
    if isinstance(value, batchy.Future):
        if isinstance(value, batchy.Task):
            return own_task(value), value  # others may wait on it: see _graphql_pending
        return value, False  # a load: others may want its key
    if is_handler(value):  # a generator expression is a list to GraphQL: not this
        return run_generator(value, f"{field.parent_name}.{field.name}"), value
    if inspect.isawaitable(value):
        return own_awaitable(value), value
    return None


@batchy.task
def _finish(
    run: _Run, rest: Sequence[Field], root_value: Any, root: _Pos
) -> Generator[Any, Any, Any]:
    return (yield from run.finish(rest, root_value, root))


def execute_planned(
    ctx: Any, root_type: Any, root_value: Any, grouped: Mapping[str, Any], serially: bool
) -> Any:
    """Execute an operation's root fields: the data, or a batchy task whose result is the data.

    Like graphql-core, it runs the resolvers it can before anything is awaited.
    """
    fragments = ctx.fragment_definitions if GRAPHQL_CORE_33 else ctx.fragments
    # A fragment cycle (only unvalidated documents have one) nests without end:
    # stop where graphql-core's recursion would, about, with its error.
    max_depth = (
        sys.getrecursionlimit() // 6 if fragments and has_fragment_cycle(fragments) else None
    )
    return _Run(ctx, max_depth).start(root_type, root_value, grouped, serially)
