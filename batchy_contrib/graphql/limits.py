"""Limits for a public GraphQL endpoint: query size before execution, objects and time during it.

::

    from batchy_contrib.graphql import graphql
    from batchy_contrib.graphql.limits import Limits

    limits = Limits.public()                 # or Limits(max_depth=12, max_cost=50_000, ...)
    result = await graphql(schema, source, limits=limits)

``graphql()``/``graphql_sync()`` add :meth:`Limits.rules` to validation and give
the executor ``max_objects`` and ``time_budget``; ``execute()``/``execute_sync()``
take ``limits=`` too, for the run-time limits (they do not validate). With
graphql-core's own ``graphql()``, pass ``rules=[*specified_rules, *limits.rules()]``.

Every measure is taken on the query as it would run: fragments are expanded, so
a 1 KB query whose fragments each spread the previous one twice counts its
2^20 fields, not its 40 lines. Expanding is not done by walking the expansion
(that walk *is* the attack): each fragment is measured once and multiplied by
its uses, so checking a hostile query costs as little as parsing it.

Cost is an upper bound, decided without variable values (validation never sees
them): each field costs ``field_cost`` (1 by default, or ``costs["Type.field"]``),
and a field that returns a list multiplies the cost of what it selects by its
``first:``/``last:``/``limit:``/``pageSize:`` argument when that is a literal,
else by ``default_list_size``. Inline fragments and fragments on abstract types
are all counted, as if every branch ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SchemaMetaFieldDef,
    SelectionSetNode,
    TypeMetaFieldDef,
    TypeNameMetaFieldDef,
    ValidationContext,
    ValidationRule,
    get_named_type,
    get_nullable_type,
)

__all__ = ["Limits"]

#: The arguments whose literal value is a list field's size.
SIZE_ARGUMENTS = ("first", "last", "limit", "pageSize", "page_size", "count")


@dataclass(frozen=True)
class Limits:
    """What one query may ask for; ``None`` switches a limit off.

    - ``max_depth``: nested fields, the operation's own fields at depth 1;
    - ``max_fields``: field selections once fragments are expanded (aliases count:
      ``a1: f a2: f`` is two);
    - ``max_aliases``: aliased fields, expanded the same way;
    - ``max_cost``: the cost bound described in the module's documentation;
    - ``max_objects``: objects completed in one response, counted as the
      executor goes (a cap on the response's size whatever validation let
      through);
    - ``time_budget``: seconds one execution may take, from its start.

    The first four are validation rules (:meth:`rules`), checked before anything
    runs; the last two are checked by batchy's planned executor while it runs.
    Going over any of them gives a GraphQL error naming the limit and the value
    measured (``extensions``: ``code="QUERY_LIMIT"``, ``limit``, ``value``); over a
    run-time limit, the data is null and the work in flight is cancelled.
    """

    max_depth: int | None = 15
    max_fields: int | None = 5_000
    max_aliases: int | None = 100
    max_cost: int | None = 100_000
    default_list_size: int = 20
    costs: Mapping[str, int] = field(default_factory=dict)
    field_cost: int = 1
    max_objects: int | None = 100_000
    time_budget: float | None = None

    @classmethod
    def public(cls, **overrides: Any) -> Limits:
        """Limits for an endpoint anyone can query (the recommended start)."""
        base = {
            "max_depth": 12,
            "max_fields": 2_000,
            "max_aliases": 30,
            "max_objects": 20_000,
            "time_budget": 5.0,
        }
        return cls(**{**base, **overrides})

    @classmethod
    def internal(cls, **overrides: Any) -> Limits:
        """Looser limits for trusted clients: still a stop for a runaway query."""
        base = {
            "max_depth": 30,
            "max_fields": 50_000,
            "max_aliases": 1_000,
            "max_cost": 5_000_000,
            "max_objects": 1_000_000,
            "time_budget": 60.0,
        }
        return cls(**{**base, **overrides})

    def rules(self) -> list[type[ValidationRule]]:
        """The validation rules that enforce these limits (add them to graphql-core's)."""
        limits = self

        class QueryLimitsRule(ValidationRule):
            def enter_operation_definition(
                self, node: OperationDefinitionNode, *_args: Any
            ) -> None:
                for error in limits.check(self.context, node):
                    self.report_error(error)

        return [QueryLimitsRule]

    def check(
        self, context: ValidationContext, operation: OperationDefinitionNode
    ) -> list[GraphQLError]:
        """The limits ``operation`` breaks, each as an error naming it and the measured value."""
        schema = context.schema
        root = {
            "query": schema.query_type,
            "mutation": schema.mutation_type,
            "subscription": schema.subscription_type,
        }[operation.operation.value]
        fragments = {
            f.name.value: f
            for f in context.document.definitions
            if isinstance(f, FragmentDefinitionNode)
        }
        measure = _Measure(self, fragments, schema)
        total = measure.selection_set(operation.selection_set, root)
        errors = []
        name = operation.name.value if operation.name else "the anonymous operation"
        for limit, value, what in (
            (self.max_depth, total.depth, "max_depth"),
            (self.max_fields, total.fields, "max_fields"),
            (self.max_aliases, total.aliases, "max_aliases"),
            (self.max_cost, total.cost, "max_cost"),
        ):
            if limit is not None and value > limit:
                errors.append(
                    GraphQLError(
                        f"{name} is over the limit {what}={limit}: it measures {value:,} "
                        f"({_MEANING[what]}). Ask for less in one query (fewer or smaller "
                        "lists, fewer fragment spreads), or raise the limit on the server.",
                        operation,
                        extensions={"code": "QUERY_LIMIT", "limit": what, "value": value},
                    )
                )
        return errors


_MEANING = {
    "max_depth": "nested fields",
    "max_fields": "fields with every fragment expanded",
    "max_aliases": "aliased fields with every fragment expanded",
    "max_cost": "estimated cost, lists counted at their size",
}


@dataclass(slots=True)
class _Size:
    depth: int = 0
    fields: int = 0
    aliases: int = 0
    cost: int = 0

    def add(self, other: _Size, times: int = 1) -> None:
        self.depth = max(self.depth, other.depth)
        self.fields += other.fields * times
        self.aliases += other.aliases * times
        self.cost += other.cost * times


class _Measure:
    """Measures selection sets, each fragment once per type it is spread into."""

    def __init__(
        self, limits: Limits, fragments: dict[str, FragmentDefinitionNode], schema: GraphQLSchema
    ) -> None:
        self.limits = limits
        self.schema = schema
        self.fragments = fragments
        self.done: dict[tuple[str, str], _Size] = {}
        self.visiting: set[str] = set()

    def selection_set(self, node: SelectionSetNode | None, parent: Any) -> _Size:
        size = _Size()
        if node is None:
            return size
        for selection in node.selections:
            if isinstance(selection, FieldNode):
                size.add(self.field(selection, parent))
            elif isinstance(selection, InlineFragmentNode):
                cond = selection.type_condition
                size.add(self.selection_set(selection.selection_set, self._type(cond, parent)))
            elif isinstance(selection, FragmentSpreadNode):
                size.add(self.spread(selection.name.value, parent))
        return size

    def spread(self, name: str, parent: Any) -> _Size:
        fragment = self.fragments.get(name)
        if fragment is None or name in self.visiting:
            return _Size()  # unknown or cyclic: graphql-core's own rules report those
        on = self._type(fragment.type_condition, parent)
        key = (name, getattr(on, "name", ""))
        found = self.done.get(key)
        if found is None:
            self.visiting.add(name)
            try:
                found = self.done[key] = self.selection_set(fragment.selection_set, on)
            finally:
                self.visiting.discard(name)
        return found

    def field(self, node: FieldNode, parent: Any) -> _Size:
        name = node.name.value
        definition = self._definition(parent, name)
        returns = None if definition is None else definition.type
        child_type: GraphQLNamedType | None = None if returns is None else get_named_type(returns)
        below = self.selection_set(node.selection_set, child_type)
        times = self._list_size(node) if _is_list(returns) else 1
        own_cost = self.limits.costs.get(f"{getattr(parent, 'name', '?')}.{name}")
        return _Size(
            depth=below.depth + 1,
            fields=1 + below.fields,
            aliases=(1 if node.alias else 0) + below.aliases,
            cost=(self.limits.field_cost if own_cost is None else own_cost) + below.cost * times,
        )

    def _definition(self, parent: Any, name: str) -> Any:
        # The meta fields are in no type's ``fields``; missing them would let an
        # introspection query's lists (``__schema { types { fields ... } }``)
        # through at the cost of one field each.
        if name == "__typename":
            return TypeNameMetaFieldDef
        if parent is not None and parent is self.schema.query_type:
            if name == "__schema":
                return SchemaMetaFieldDef
            if name == "__type":
                return TypeMetaFieldDef
        if isinstance(parent, (GraphQLObjectType, GraphQLInterfaceType)):
            return parent.fields.get(name)
        return None

    def _list_size(self, node: FieldNode) -> int:
        for argument in node.arguments or ():
            if argument.name.value in SIZE_ARGUMENTS and isinstance(argument.value, IntValueNode):
                return max(0, int(argument.value.value))
        return self.limits.default_list_size

    def _type(self, condition: Any, parent: Any) -> Any:
        if condition is None:
            return parent
        return self.schema.get_type(condition.name.value) or parent


def _is_list(type_: Any) -> bool:
    return type_ is not None and isinstance(get_nullable_type(type_), GraphQLList)
