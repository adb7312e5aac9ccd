"""The planned executor: runs a GraphQL operation as one batchy handler, from per-selection plans.

graphql-core executes field by field: for every field of every object it looks
up the field definition, builds a resolve info, coerces the arguments, creates a
path and walks ``complete_value``'s chain of type checks; and in async execution
every awaitable field becomes a coroutine and every object and list an
``asyncio.gather``. On a feed of 50 posts with 20 comments that costs more than
the data. Here that work is done once per selection (``_graphql_plan``), and
values are completed from the plans (``_graphql_complete``).

A value that is not there yet leaves its position empty and goes into a
:class:`batchy.Watch`, with where it belongs (``_graphql_pending``). The handler
running the operation completes every position it can, then waits until any
watched value is done and completes that one, so its loads join the round in
which it became ready, and a slow loader holds back only the positions that
wait for it.

Errors follow the spec as graphql-core applies it: a field error nulls the field
and is reported with its path; in a non-null position it nulls the nearest
nullable position above, which may be an object completed long before (each
object and list keeps a :class:`Pos` that links it to its parent for that);
errors below a position that was nulled are dropped, as graphql-core 3.3 does.

When several errors race to null one position, the first to *arrive* is kept:
a position's value arrives when batchy's round delivers it, and a value's own
completion that needs another round (a pending sub-field) arrives after the
values delivered in this one. graphql-core keeps the first in the order its
asyncio tasks happen to run, which an ``async def`` that never really suspends
makes depth-first; the two agree when each error arrives in a different round,
and batchy's choice depends only on rounds, never on the loop's timing of tasks.

Run-time limits (``Limits.max_objects``, ``time_budget``) are checked by a
:class:`Budget`; going over ends the execution with null data (``_graphql_budget``).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from graphql import GraphQLError

import batchy

from ._budget import Budget, LimitStop
from ._complete import Completer
from ._plan import GRAPHQL_CORE_33, Field, has_fragment_cycle
from ._positions import Pos, Slot
from .limits import Limits

__all__ = ["execute_planned"]


class _Run(Completer):
    """One execution of one operation (a graphql-core execution context does the rest)."""

    def stop(self, error: GraphQLError) -> None:
        """A limit was reached: no data, the limit's error, and nothing left running."""
        self.pending.cancel_all()
        self.plan.add_error(error, None)
        self.data = None

    # -- the handler ----------------------------------------------------------------

    def start(
        self, root_type: Any, root_value: Any, grouped: Mapping[str, Any], serially: bool
    ) -> Any:
        """Run what graphql-core runs before its first await: the data, or a task for it.

        The root fields are resolved in this call, as graphql-core resolves them;
        if any value is pending, the task returned completes the data.
        """
        root = Pos(None, None, None, False, None, root_type.name, None)
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
            if self.budget is not None:
                self.budget.check_time()
        except GraphQLError as error:
            # A non-null root field failed: no data at all.
            self.pending.cancel_all()
            self.plan.add_error(error, None)
            return None
        except LimitStop as stop:
            self.stop(stop.error)
            return None
        return self.data

    def finish(self, rest: Sequence[Field], root_value: Any, root: Pos) -> Generator[Any, Any, Any]:
        """The handler: completes what start() left waiting, then the mutation's other fields."""
        self.pending.start()
        self.run_eagerly()
        try:
            if self.budget is not None:
                remaining = self.budget.remaining()
                if remaining is not None:
                    self.pending.wake_after(remaining)  # a sleeping resolver cannot hold us
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
        except LimitStop as stop:
            self.stop(stop.error)
            return None
        finally:
            # Work under a null that nothing waits for any more; or we were cancelled.
            self.pending.cancel_all()
        return self.data

    def drain(self) -> Generator[Any, Any, None]:
        """Go on with each waiting position as its value arrives, until none waits."""
        pending = self.pending
        budget = self.budget
        while pending.slots:
            if self.sweep:
                # Positions were nulled: stop waiting for the work below them.
                self.sweep = False
                pending.drop(self.slot_dropped)
                if not pending.slots:
                    return
            taken = yield from pending.taken()
            if budget is not None:
                budget.check_time()
            for slot, fut in taken:
                resume, ftype, field, container, key, pos, extra = slot
                if self.nulled and self.slot_dropped(slot):
                    continue
                try:
                    resume(fut, ftype, field, container, key, pos, extra)
                except Exception as error:
                    self.pending_error(error, ftype, field, container, key, pos)
                    if self.data is None:
                        return

    def slot_dropped(self, slot: Slot) -> bool:
        """True if the slot's position, or one above it, was nulled."""
        return (id(slot[3]), slot[4]) in self.nulled or self.is_dropped(slot[5])


@batchy.task
def _finish(
    run: _Run, rest: Sequence[Field], root_value: Any, root: Pos
) -> Generator[Any, Any, Any]:
    return (yield from run.finish(rest, root_value, root))


def execute_planned(
    ctx: Any,
    root_type: Any,
    root_value: Any,
    grouped: Mapping[str, Any],
    serially: bool,
    limits: Limits | None = None,
) -> Any:
    """Execute an operation's root fields: the data, or a batchy task whose result is the data.

    Like graphql-core, it runs the resolvers it can before anything is awaited.
    ``limits``: its ``max_objects`` and ``time_budget`` are enforced as it runs.
    """
    fragments = ctx.fragment_definitions if GRAPHQL_CORE_33 else ctx.fragments
    # A fragment cycle (only unvalidated documents have one) nests without end:
    # stop where graphql-core's recursion would, about, with its error.
    max_depth = (
        sys.getrecursionlimit() // 6 if fragments and has_fragment_cycle(fragments) else None
    )
    run = _Run(ctx, max_depth, Budget.of(limits))
    return run.start(root_type, root_value, grouped, serially)
