"""The record of sharded runs kept in a store object, for stores with no table for it (memory).

``kept`` maps a sharded job's name to its runs and when each was last started.
"""

from __future__ import annotations

__all__ = ["Kept", "listed", "note", "started"]

Kept = dict[str, dict[str, float]]


def note(kept: Kept, name: str, run: str, now: float, keep: float) -> None:
    """Record the start of ``run``; forget the job's runs started more than ``keep`` ago."""
    runs = kept.setdefault(name, {})
    runs[run] = now
    for old in [r for r, at in runs.items() if at < now - keep]:
        del runs[old]


def listed(kept: Kept, name: str, now: float, keep: float, limit: int) -> list[tuple[str, float]]:
    """Up to ``limit`` runs of ``name`` started in the last ``keep`` seconds, latest first."""
    found = [(r, t) for r, t in kept.get(name, {}).items() if t >= now - keep]
    return sorted(found, key=lambda rt: (-rt[1], rt[0]))[:limit]


def started(kept: Kept, name: str, run: str) -> float | None:
    """When ``run`` of ``name`` was last started, ``None`` if it never was (or is forgotten)."""
    return kept.get(name, {}).get(run)
