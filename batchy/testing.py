"""Test helpers: record the batches code makes, and guard handlers against N+1 regressions.

::

    from batchy.testing import record

    def test_post_page_is_batched():
        with record() as rec:
            batchy.run(post_view(1))
        assert rec.calls(users_by_id) == [[1, 2, 3]]
        rec.assert_max(rounds=3, calls={users_by_id: 1})
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from batchy import BatchEvent, Hook, Loader, RoundEvent, hooked

__all__ = ["Recorder", "record"]


class Recorder(Hook):
    """A hook that keeps every round and every batch call, in order."""

    def __init__(self) -> None:
        self.round_events: list[RoundEvent] = []
        self.batches: list[BatchEvent] = []
        self.failures: list[tuple[Any, BaseException]] = []

    def round_started(self, event: RoundEvent) -> None:
        self.round_events.append(event)

    def batch_flushed(self, event: BatchEvent) -> None:
        self.batches.append(event)

    def task_failed(self, task: Any, error: BaseException) -> None:
        self.failures.append((task, error))

    @property
    def rounds(self) -> int:
        """How many rounds were flushed."""
        return len(self.round_events)

    def calls(self, loader: Loader[Any, Any] | str) -> list[list[Any]]:
        """The keys of each call of ``loader`` (a loader or its name), in order."""
        name = loader if isinstance(loader, str) else loader.name
        return [list(b.keys) for b in self.batches if b.loader == name]

    def call_counts(self) -> dict[str, int]:
        """Calls per loader name."""
        counts: dict[str, int] = {}
        for b in self.batches:
            counts[b.loader] = counts.get(b.loader, 0) + 1
        return counts

    def report(self) -> str:
        """What happened, one line per round, for assertion messages."""
        lines = []
        for r in self.round_events:
            calls = [b for b in self.batches if b.round == r.number]
            parts = ", ".join(f"{b.loader}({len(b.keys)} keys)" for b in calls)
            lines.append(f"  round {r.number}: {parts or ', '.join(r.loaders)}")
        return "\n".join(lines) or "  (no rounds)"

    def assert_max(
        self,
        *,
        rounds: int | None = None,
        calls: Mapping[Loader[Any, Any] | str, int] | None = None,
    ) -> None:
        """Fail with a readable report if more rounds or loader calls happened than allowed."""
        problems = []
        if rounds is not None and self.rounds > rounds:
            problems.append(f"{self.rounds} rounds, expected at most {rounds}")
        for loader, limit in (calls or {}).items():
            got = len(self.calls(loader))
            name = loader if isinstance(loader, str) else loader.name
            if got > limit:
                problems.append(f"{got} calls to {name}, expected at most {limit}")
        if problems:
            raise AssertionError(
                "batching regressed: " + "; ".join(problems) + "\n" + self.report()
            )


@contextlib.contextmanager
def record() -> Iterator[Recorder]:
    """Record every round and batch call made inside the ``with`` block."""
    recorder = Recorder()
    with hooked(recorder):
        yield recorder
