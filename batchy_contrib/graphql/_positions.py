"""One execution's response under construction: its positions, what was nulled, and where errors go.

Each object and list completed keeps a :class:`Pos` that links it to its parent:
an error in a non-null position nulls the nearest nullable position above, which
may be an object completed long before. A nulled position is remembered, so
that the work still waiting below it is dropped, and so are its errors (as
graphql-core 3.3 drops them).
"""

from __future__ import annotations

import sys
from typing import Any

from graphql import located_error
from graphql.pyutils import Path

from ._budget import Budget
from ._pending import Pending
from ._plan import GRAPHQL_CORE_33, LEAF, Field, Planner, Type

__all__ = ["Pos", "Positions", "Slot"]


class Pos:
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
        parent: Pos | None,
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


# Work waiting in Pending: how to go on, the position's type, field,
# container, key and Pos, and what else going on needs.
Slot = tuple[Any, Type, Field, Any, Any, Pos, tuple[Any, ...]]


class Positions:
    """The state of one execution, and the positions its errors null."""

    def __init__(self, ctx: Any, max_depth: int | None, budget: Budget | None) -> None:
        self.ctx = ctx
        self.plan = Planner(ctx)
        self.info = self.plan.info
        self.type_resolver = ctx.type_resolver
        # graphql-core 3.3 asks its (replaceable) predicate first, so a value
        # that is both iterable and async-iterable is read asynchronously; 3.2
        # reads anything iterable as a list, and an async iterable only otherwise.
        self.is_async_iterable = ctx.is_async_iterable if GRAPHQL_CORE_33 else None
        # Positions nulled by an error: (id(container), key). Work still waiting
        # below one of them is dropped, and so are its errors.
        self.nulled: set[tuple[int, Any]] = set()
        self.pending = Pending()
        self.add = self.pending.add
        # Set when a position is nulled: drop the slots below it before waiting.
        self.sweep = False
        # Only a document with a fragment cycle can nest without end; see execute_planned().
        self.max_depth = max_depth
        # Down to which depth async resolvers run at once (Completer.complete):
        # none before the handler runs, then as deep as a tenth of the stack left
        # allows (each such level takes a few frames; deeper ones are stepped
        # by the scheduler, from the handler's own shallow stack).
        self.eager = 0
        self.data: dict[str, Any] | None = None
        # Objects completed, and when to ask the budget next: without limits
        # never, so the only cost per object is one addition and one comparison.
        self.budget = budget
        self.objects = 0
        self.check_at = budget.check(0) if budget is not None else 1 << 62

    def run_eagerly(self) -> None:
        """The handler runs: async resolvers may run at once from here on (see ``eager``)."""
        depth, frame = 0, sys._getframe()
        while frame is not None:
            depth += 1
            frame = frame.f_back  # type: ignore[assignment]
        self.eager = max(0, sys.getrecursionlimit() - depth) // 10

    def child_pos(
        self, ftype: Type, container: Any, key: Any, pos: Pos, typename: str | None
    ) -> Pos:
        path = Path(pos.path, key, pos.typename)
        # Items of a list keep the field's path in their info; a field's own path is its.
        field_path = pos.field_path if pos.typename is None else path
        child = Pos(pos, container, key, not ftype.non_null, path, typename, field_path)
        if self.max_depth is not None and child.depth > self.max_depth:
            # graphql-core's recursion ends here, on its stack's limit.
            raise RecursionError("maximum recursion depth exceeded")
        return child

    def info_path(self, pos: Pos, key: Any) -> Path:
        return pos.field_path if pos.typename is None else Path(pos.path, key, pos.typename)  # type: ignore[return-value]

    def field_error(
        self, error: Exception, ftype: Type, field: Field, container: Any, key: Any, pos: Pos
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

    def is_dropped(self, pos: Pos | None) -> bool:
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
        self, error: Exception, ftype: Type, field: Field, container: Any, key: Any, pos: Pos
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
