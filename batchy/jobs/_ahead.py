"""Jobs a worker claimed ahead of a free slot (``prefetch``): held and renewed until they begin.

Why claim ahead: a worker's turn is one round trip to the store, and without
jobs in hand the worker waits for it doing nothing. With short jobs (a few
milliseconds) that wait is as long as the work. Jobs claimed ahead begin as soon
as the next turn is on its way, so the two overlap; and they begin together, so
their loads still share one batch.

What they cost, which is why it is off by default: a job claimed ahead is
leased to this worker (``running`` in the store) while it waits for a slot, so
another worker cannot take it. With long jobs that holds work back from idle
workers, the problem Celery users know from its prefetch multiplier.
"""

from __future__ import annotations

from ._leases import Claim, Leases
from ._model import Claimed, Outcome

__all__ = ["Ahead"]


class Ahead:
    """Up to ``size`` claims waiting for a slot, oldest first."""

    __slots__ = ("_waiting", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._waiting: dict[Claim, Claimed] = {}  # insertion order: claim order

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, claim: object) -> bool:
        return claim in self._waiting

    def add(self, claim: Claim, job: Claimed) -> None:
        self._waiting[claim] = job

    def take(self, count: int) -> list[tuple[Claim, Claimed]]:
        """The oldest ``count`` claims, no longer waiting."""
        taken = []
        for claim in list(self._waiting)[:count]:
            taken.append((claim, self._waiting.pop(claim)))
        return taken

    def pop(self, claim: Claim) -> Claimed | None:
        return self._waiting.pop(claim, None)

    def hand_back(self, leases: Leases) -> list[Outcome]:
        """Release every waiting claim still held: the store gives those jobs to others."""
        outcomes = leases.release(self._waiting)
        self._waiting.clear()
        return outcomes
