"""Completing values: objects, leaves, lists and abstract types, now or when they arrive.

The work that does not depend on the value is done once per *selection* (an
object type and the field nodes asking for it), as graphql-jit does for
graphql-js: a :class:`Field` holds the definition, the resolver, the coerced
arguments and the :class:`Type` that completes its value. A field answered by
the default resolver from a ``dict`` with a ``String`` or ``ID`` costs a dict
look-up and a type check. Paths and resolve infos are made only where they are
read: for resolvers of our own, for positions that hold objects or lists, for
errors.

A value that is not there yet (a loader future, a batchy task, a generator
resolver, an ``async def`` resolver, the next item of an async iterable) leaves
its position empty and becomes a *slot* in :class:`Pending`: how to go on
(a ``resume_*`` method), and where. The handler in ``graphql_executor`` calls it
when the value is there.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import CoroutineType, GeneratorType
from typing import Any

from graphql import GraphQLError, Undefined
from graphql.pyutils import Path, is_iterable

import batchy

from ._async import is_handler, run_generator
from ._pending import (
    END,
    close_iterator,
    close_unstarted,
    next_item,
    own_awaitable,
    own_coroutine,
    own_task,
    read_all,
)
from ._plan import LEAF, LIST, OBJECT, Field, Type
from ._positions import Pos, Positions

__all__ = ["Completer"]

# Values that are what they are: never pending, never callables.
_LEAF_VALUES = frozenset({str, int, float, bool})


class Completer(Positions):
    """Completes the values of one execution; :class:`graphql_executor._Run` drives it."""

    def object(
        self, fields: list[Field], source: Any, pos: Pos, result: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Complete one object: resolve and complete every field; defer what is pending."""
        self.objects += 1
        if self.objects >= self.check_at:
            self.check_at = self.budget.check(self.objects)  # type: ignore[union-attr]
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
                elif field.attribute is not None:
                    value = getattr(source, field.attribute)
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
        self, ftype: Type, field: Field, value: Any, container: Any, key: Any, pos: Pos
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
        elif type(value) not in _NOT_PENDING:
            try:
                pending = _pending(value, field)
                if pending is not None:
                    fut, inner = pending
                    if type(inner) is CoroutineType and pos.depth < self.eager:
                        # graphql-core runs an async resolver at once, up to its first
                        # wait: one that does not wait completes here, depth first, as
                        # a plain resolver's value does (and so keeps the same error
                        # when two race to null one position). Not deep down (see
                        # Positions.eager): the stack would end the query too soon.
                        fut.start_eagerly()  # type: ignore[attr-defined]
            except BaseException:  # (a stack at its limit): never leave a coroutine unclosed
                _close_unstarted((value,))
                raise
            if pending is not None:
                if fut.done():  # a key loaded earlier in this scope, or run eagerly
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

    # -- abstract types and is_type_of ------------------------------------------------

    def object_value(
        self,
        object_type: Any,
        ftype: Type,
        field: Field,
        value: Any,
        container: Any,
        key: Any,
        pos: Pos,
    ) -> Any:
        if object_type.is_type_of:
            matches = object_type.is_type_of(value, self.info(field, self.info_path(pos, key)))
            if inspect.isawaitable(matches):
                extra = (object_type, value)
                then = (self.resume_is_type_of, ftype, field, container, key, pos, extra)
                self.add(own_awaitable(matches), then, matches)
                return None
            if not matches:
                raise self.plan.invalid_return_type_error(ftype, object_type, value)
        fields = self.plan.subfields(ftype, object_type)
        return self.object(
            fields, value, self.child_pos(ftype, container, key, pos, object_type.name)
        )

    def runtime_type(
        self, ftype: Type, field: Field, value: Any, container: Any, key: Any, pos: Pos
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

    # -- lists --------------------------------------------------------------------------

    def list(
        self, ftype: Type, field: Field, value: Any, container: Any, key: Any, pos: Pos
    ) -> Any:
        is_async_iterable = self.is_async_iterable
        if is_async_iterable is not None and is_async_iterable(value):
            # graphql-core 3.3: one item at a time, each completed as it comes.
            items: list[Any] = []
            state = (value.__aiter__(), items, self.child_pos(ftype, container, key, pos, None))
            self.next_item(ftype, field, container, key, pos, state)
            return None
        if not _is_iterable(value):
            if is_async_iterable is None and hasattr(value, "__aiter__"):
                # graphql-core 3.2: every item read first, then the list completed.
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
                try:
                    self.field_error(error, item, field, result, index, own)
                except Exception:
                    # A non-null item failed the list before the items after it
                    # were looked at: close their coroutines, never to run.
                    _close_unstarted(value, index + 1)
                    raise
                result.append(None)
        return result

    def next_item(
        self, ftype: Type, field: Field, container: Any, key: Any, pos: Pos, state: Any
    ) -> None:
        """Wait for the next item of the async iterator in ``state`` (iterator, items, Pos)."""
        then = (self.resume_item, ftype, field, container, key, pos, state)
        self.add(next_item(state[0]), then, None)

    def resume_item(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: Pos,
        extra: tuple[Any, ...],
    ) -> None:
        iterator, result, own = extra
        try:
            element = fut.result()
        except Exception as error:
            # graphql-core closes the iterator, then fails the list with the error.
            self.close_then_raise(iterator, error, ftype, field, container, key, pos)
            return
        if element is END:
            container[key] = result
            return
        item: Type = ftype.item  # type: ignore[assignment]
        index = len(result)
        if type(element) in item.as_is:
            result.append(element)
        else:
            try:
                result.append(self.complete(item, field, element, result, index, own))
            except Exception as error:
                try:
                    self.field_error(error, item, field, result, index, own)
                except GraphQLError as located:
                    # A non-null item failed, and with it the list: graphql-core
                    # stops reading, closes the iterator, then reports this error
                    # (not one the iterator would have raised later).
                    self.close_then_raise(iterator, located, ftype, field, container, key, pos)
                    return
                result.append(None)
        self.next_item(ftype, field, container, key, pos, extra)

    def close_then_raise(
        self,
        iterator: Any,
        error: Exception,
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: Pos,
    ) -> None:
        """``aclose()`` the iterator, then fail ``container[key]`` with ``error``."""
        aclose = getattr(iterator, "aclose", None)
        if aclose is None:
            raise error
        then = (self.resume_raise, ftype, field, container, key, pos, (error,))
        self.add(close_iterator(aclose), then, None)

    # -- going on when a value is there --------------------------------------------------

    def resume(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: Pos,
        extra: tuple[Any, ...],
    ) -> None:
        container[key] = self.complete(ftype, field, fut.result(), container, key, pos)

    def resume_raise(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: Pos,
        extra: tuple[Any, ...],
    ) -> None:
        raise extra[0]

    def resume_runtime_type(
        self,
        fut: batchy.Future[Any],
        ftype: Type,
        field: Field,
        container: Any,
        key: Any,
        pos: Pos,
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
        pos: Pos,
        extra: tuple[Any, ...],
    ) -> None:
        object_type, value = extra
        if not fut.result():
            raise self.plan.invalid_return_type_error(ftype, object_type, value)
        fields = self.plan.subfields(ftype, object_type)
        child = self.child_pos(ftype, container, key, pos, object_type.name)
        container[key] = self.object(fields, value, child)


def _close_unstarted(items: Any, start: int = 0) -> None:
    """Close the coroutines (of ``async def`` resolvers) in ``items[start:]`` that never ran."""
    if isinstance(items, (list, tuple)):
        for item in items[start:]:
            if isinstance(item, (list, tuple)):  # a list of lists
                _close_unstarted(item)
            else:
                close_unstarted(item)


def _is_iterable(value: Any) -> bool:
    return type(value) is list or is_iterable(value)


def _pending(value: Any, field: Field) -> tuple[batchy.Future[Any], Any] | None:
    """The future to wait on when ``value`` is not there yet, and what it runs if it is ours.

    (False when others may share it: see ``Pending.add``.)
    """
    if type(value) is CoroutineType:  # an async def resolver's: the most frequent
        return own_coroutine(value), value
    if isinstance(value, batchy.Future):
        if isinstance(value, batchy.Task):
            return own_task(value), value  # others may wait on it: see _graphql_pending
        return value, False  # a load: others may want its key
    if is_handler(value):  # a generator expression is a list to GraphQL: not this
        return run_generator(value, f"{field.parent_name}.{field.name}"), value
    if inspect.isawaitable(value):
        return own_awaitable(value), value
    # Whether a value is pending depends on its type alone, except for a
    # generator (a handler or a generator-based coroutine): remember the type.
    if type(value) is not GeneratorType and len(_NOT_PENDING) < 1_000:
        _NOT_PENDING.add(type(value))
    return None


# Types whose values are never pending (dicts, rows, a framework's objects): one
# set look-up for them instead of the checks above. Bounded, in case classes
# are made at run time.
_NOT_PENDING: set[type] = set()
