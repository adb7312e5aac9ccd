"""Plans of the GraphQL executor: what completing a field costs once per selection, not per value.

A :class:`Field` holds, for one response key of one object type, the field
definition, the resolver (``None`` for graphql-core's default resolver, which the
executor does inline, and the attribute a strawberry basic field reads, which it
reads inline too), the arguments coerced once, and the :class:`Type` that
completes its value. A :class:`Planner` makes them for one execution, and hides
the few calls that differ between graphql-core 3.2 and 3.3.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import graphql as gql
from graphql import GraphQLError
from graphql.pyutils import Path

__all__ = [
    "ABSTRACT",
    "BYPASSED_HOOKS",
    "has_fragment_cycle",
    "overridden_hooks",
    "uses_incremental_delivery",
    "GRAPHQL_CORE_33",
    "LEAF",
    "LIST",
    "OBJECT",
    "Field",
    "Planner",
    "Type",
]

GRAPHQL_CORE_33: bool = hasattr(gql.execution, "Executor")
# graphql-core's execution module (the package exports a function of the same name).
_core: Any = importlib.import_module(
    "graphql.execution.executor" if GRAPHQL_CORE_33 else "graphql.execution.execute"
)
_Base: Any = gql.execution.Executor if GRAPHQL_CORE_33 else gql.execution.ExecutionContext  # type: ignore[attr-defined,unused-ignore]

# Kinds of output types, by how a value of them completes.
LEAF = 0
OBJECT = 1
ABSTRACT = 2
LIST = 3

_tuple_new = tuple.__new__
_PROBE_FIELD = gql.GraphQLField(gql.GraphQLString)
_PROBE_NODES = [gql.FieldNode(name=gql.NameNode(value="probe"))]


class Type:
    """How to complete a value of one output type at one selection."""

    __slots__ = ("as_is", "core_nodes", "item", "kind", "non_null", "objects", "type")

    def __init__(self, output_type: Any, core_nodes: Any) -> None:
        self.non_null = isinstance(output_type, gql.GraphQLNonNull)
        named = output_type.of_type if self.non_null else output_type
        self.type = named
        # The field nodes as graphql-core's own calls take them (3.3: field details).
        self.core_nodes = core_nodes
        # Values of these exact types complete to themselves (String and ID of a
        # str, Boolean of a bool): no call to serialize.
        self.as_is: frozenset[type] = frozenset()
        self.item: Type | None = None
        # The fields to complete per runtime object type (one unless abstract).
        self.objects: dict[Any, list[Field]] = {}
        if isinstance(named, gql.GraphQLList):
            self.kind = LIST
            self.item = Type(named.of_type, core_nodes)
        elif isinstance(named, (gql.GraphQLScalarType, gql.GraphQLEnumType)):
            self.kind = LEAF
            if named is gql.GraphQLString or named is gql.GraphQLID:
                self.as_is = frozenset({str})
            elif named is gql.GraphQLBoolean:
                self.as_is = frozenset({bool})
        elif isinstance(named, gql.GraphQLObjectType):
            self.kind = OBJECT
        else:
            self.kind = ABSTRACT


class Field:
    """One response key of one object type: all about it that does not depend on the value."""

    __slots__ = (
        "args",
        "attribute",
        "field_def",
        "info_head",
        "key",
        "name",
        "nodes",
        "parent_name",
        "parent_type",
        "resolve",
        "type",
    )

    def __init__(
        self, planner: Planner, parent_type: Any, key: str, core_nodes: Any, field_def: Any
    ) -> None:
        self.key = key
        self.nodes: list[Any] = planner.to_nodes(core_nodes)
        self.name: str = self.nodes[0].name.value
        self.parent_type = parent_type
        self.parent_name: str = parent_type.name
        self.field_def = field_def
        self.type = Type(field_def.type, core_nodes)
        resolve = field_def.resolve or planner.field_resolver
        middleware = planner.ctx.middleware_manager
        if middleware:
            resolve = middleware.get_field_resolver(resolve)
        # None: graphql-core's default resolver, which the executor does inline.
        self.resolve: Callable[..., Any] | None = (
            None if resolve is gql.default_field_resolver else resolve
        )
        # A resolver known to read one attribute and nothing else: read it inline.
        self.attribute: str | None = attribute_read(resolve, field_def)
        # Arguments are the same for every object: coerced once. Where one
        # resolver could change them (a list, an input object) and where coercion
        # fails, they are coerced afresh for every call, as graphql-core does: each
        # resolver gets its own copy, each failure its own error.
        self.args: dict[str, Any] = {}
        try:
            self.args = planner.arguments(field_def, core_nodes)
            fresh = not all(
                type(v) in _IMMUTABLE or isinstance(v, Enum) for v in self.args.values()
            )
        except Exception:
            fresh = True
        if fresh:
            self.resolve = _fresh_args(resolve, lambda: planner.arguments(field_def, core_nodes))
            self.args = {}
        self.info_head = (self.name, self.nodes, field_def.type, parent_type)


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def attribute_read(resolve: Any, field_def: Any) -> str | None:
    """The attribute ``resolve`` returns from its source, if that is all it does.

    Strawberry gives a field with no resolver, permission or extension of its
    own (a "basic field") a resolver that returns ``getattr(source,
    python_name)`` and ignores its info and arguments, so that, in strawberry's
    words, "we can avoid constructing an Info object". graphql-core's execution
    builds one anyway; the planned executor reads the attribute itself. Anything
    else (a middleware around it, exception handlers, another default resolver)
    is called as it is.
    """
    if getattr(resolve, "__name__", None) != "_get_basic_result":
        return None
    definition = (field_def.extensions or {}).get("strawberry-definition")
    if definition is None or getattr(definition, "default_resolver", None) is not getattr:
        return None
    if not getattr(definition, "is_basic_field", False):
        return None
    name = getattr(definition, "python_name", None)
    return name if isinstance(name, str) else None


def _fresh_args(
    resolve: Callable[..., Any], arguments: Callable[[], dict[str, Any]]
) -> Callable[..., Any]:
    def resolve_fresh(source: Any, info: Any) -> Any:
        return resolve(source, info, **arguments())

    return resolve_fresh


class Planner:
    """Makes the plans of one execution, on the execution context graphql-core built."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.field_resolver = ctx.field_resolver
        self.to_nodes: Callable[[Any], list[Any]] = _core.to_nodes if GRAPHQL_CORE_33 else list
        self.add_error: Callable[[GraphQLError, Path | None], None] = ctx.collected_errors.add
        # The plans of the subfields of each (object type, field nodes): see subfields().
        self.selections: dict[tuple[Any, ...], list[Field]] = {}
        # graphql-core 3.3's @experimental_disableErrorPropagation turns it off.
        self.propagate = bool(getattr(ctx, "error_propagation", True))
        # graphql-core's own resolve info is a named tuple whose fields after
        # `path` are the same for the whole execution: made from a template.
        # A subclass that builds its own (strawberry's) is asked every time.
        self.custom_info = type(ctx).build_resolve_info is not _Base.build_resolve_info
        if not self.custom_info:
            probe = ctx.build_resolve_info(_PROBE_FIELD, _PROBE_NODES, None, None)
            self.info_class = type(probe)
            self.info_tail = tuple(probe)[5:]

    def info(self, field: Field, path: Path) -> Any:
        """The resolve info of ``field`` at ``path``."""
        if self.custom_info:
            return self.ctx.build_resolve_info(
                field.field_def, field.nodes, field.parent_type, path
            )
        return _tuple_new(self.info_class, (*field.info_head, path, *self.info_tail))

    def fields(self, grouped: Mapping[str, Any], object_type: Any) -> list[Field]:
        """The plans of the fields collected in ``grouped`` (response key -> nodes)."""
        fields = []
        for key, core_nodes in grouped.items():
            node = core_nodes[0].node if GRAPHQL_CORE_33 else core_nodes[0]
            field_def = self.field_def(object_type, node)
            if field_def is not None:  # validation lets an unknown field through: skip it
                fields.append(Field(self, object_type, key, core_nodes, field_def))
        return fields

    def subfields(self, ftype: Type, object_type: Any) -> list[Field]:
        """The fields to complete for a value of ``object_type`` at the selection of ``ftype``."""
        fields = ftype.objects.get(object_type)
        if fields is None:
            # Field nodes that recur at many positions (a fragment spread under
            # several aliases) are planned once: without this, a query whose
            # fragments each spread the previous one under two aliases would
            # make a plan per object, 2^depth of them.
            key = (object_type, *map(id, self.to_nodes(ftype.core_nodes)))
            fields = self.selections.get(key)
            if fields is None:
                collected = self.ctx.collect_subfields(object_type, ftype.core_nodes)
                grouped = collected[0] if GRAPHQL_CORE_33 else collected
                fields = self.selections[key] = self.fields(grouped, object_type)
            ftype.objects[object_type] = fields
        return fields

    def field_def(self, parent_type: Any, node: Any) -> Any:
        if GRAPHQL_CORE_33:
            return self.ctx.schema.get_field(parent_type, node.name.value)
        return _core.get_field_def(self.ctx.schema, parent_type, node)

    def arguments(self, field_def: Any, core_nodes: Any) -> dict[str, Any]:
        values: Any = gql.execution.values
        ctx = self.ctx
        if not GRAPHQL_CORE_33:
            return values.get_argument_values(field_def, core_nodes[0], ctx.variable_values)  # type: ignore[no-any-return]
        first = core_nodes[0]
        if not (field_def.args or first.node.arguments):
            return {}
        return values.get_argument_values(  # type: ignore[no-any-return]
            field_def,
            first.node,
            ctx.variable_values,
            first.fragment_variable_values,
            ctx.hide_suggestions,
        )

    def invalid_return_type_error(self, ftype: Type, object_type: Any, value: Any) -> GraphQLError:
        return _core.invalid_return_type_error(object_type, value, ftype.core_nodes)  # type: ignore[no-any-return]


# graphql-core's own hooks that the planned executor does not call: a subclass
# that overrides one of them runs on graphql-core's execution instead, where it
# is called. (The hooks it does call: build_resolve_info, complete_leaf_value,
# ensure_valid_runtime_type, collect_subfields, build_response, execute_operation.)
BYPASSED_HOOKS = (
    "execute_collected_root_fields",
    "execute_root_grouped_field_set",
    "execute_fields",
    "execute_fields_serially",
    "execute_field",
    "handle_field_error",
    "complete_value",
    "complete_awaitable_value",
    "complete_list_value",
    "complete_iterable_value",
    "complete_list_item_value",
    "complete_awaitable_list_item_value",
    "complete_async_iterator_value",
    "complete_abstract_value",
    "complete_object_value",
    "collect_and_execute_subfields",
    "execute_collected_subfields",
)


def overridden_hooks(cls: type[Any], ours: tuple[type[Any], ...]) -> list[str]:
    """The :data:`BYPASSED_HOOKS` that ``cls`` defines outside graphql-core and ``ours``."""
    found = []
    for name in BYPASSED_HOOKS:
        for klass in cls.__mro__:
            if klass in ours or name not in vars(klass):
                continue
            if not klass.__module__.startswith("graphql."):
                found.append(name)
            break
    return found


def has_fragment_cycle(fragments: Mapping[str, Any]) -> bool:
    """True if a fragment spreads itself, directly or not (only unvalidated documents do).

    Such a document asks for a selection without end; graphql-core's recursion
    ends it on a RecursionError, the planned executor's watch loop never would.
    """
    spreads = {
        name: _spreads(getattr(f, "definition", f).selection_set) for name, f in fragments.items()
    }
    done: set[str] = set()
    for start, first in spreads.items():
        # Depth first, with the names on the current path: one seen again is a cycle.
        stack = [(start, iter(first))]
        on_path = {start}
        while stack:
            name, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(name)
                done.add(name)
            elif child in on_path:
                return True
            elif child not in done and child in spreads:
                on_path.add(child)
                stack.append((child, iter(spreads[child])))
    return False


def _spreads(selection_set: Any) -> set[str]:
    names: set[str] = set()
    todo = [selection_set]
    while todo:
        current = todo.pop()
        if current is None:
            continue
        for selection in current.selections:
            if isinstance(selection, gql.FragmentSpreadNode):
                names.add(selection.name.value)
            else:
                todo.append(selection.selection_set)
    return names


def uses_incremental_delivery(document: Any) -> bool:
    """True if the document asks for ``@defer`` or ``@stream`` (left to graphql-core)."""
    found = False

    class Visitor(gql.Visitor):
        def enter_directive(self, node: Any, *_: Any) -> Any:
            nonlocal found
            if node.name.value in ("defer", "stream"):
                found = True
                return gql.BREAK
            return None

    gql.visit(document, Visitor())
    return found
