"""Which queues a worker fetches from, and in what order: queue specs and the weighted fetch."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from ._errors import ConfigError

__all__ = ["fetch_order", "parse_queues"]


def parse_queues(specs: Iterable[str | tuple[str, int]]) -> list[tuple[str, int | None]]:
    """``["critical,2", "default"]`` -> ``[("critical", 2), ("default", None)]``."""
    out: list[tuple[str, int | None]] = []
    for spec in specs:
        if isinstance(spec, tuple):
            name, weight_text = spec[0], str(spec[1])
        elif "," in spec:
            name, weight_text = spec.split(",", 1)
        else:
            out.append((spec, None))
            continue
        # isdigit() alone takes '²', which int() refuses: ASCII digits only.
        if not (weight_text.isascii() and weight_text.isdigit()) or int(weight_text) < 1:
            raise ConfigError(
                f"queue {name!r}: weight {weight_text!r} is not a positive integer; "
                "write -q critical,2 (critical is fetched twice as often) or -q critical"
            )
        out.append((name, int(weight_text)))
    _check_specs(out)
    return out


def _check_specs(specs: list[tuple[str, int | None]]) -> None:
    """Refuse a queue named twice ("queues a, a"). A queue without a weight among
    weighted ones is drawn with weight 1, as in Sidekiq (-q critical,2 -q default)."""
    names = [n for n, _ in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"queue {twice[0]!r} is given more than once ({', '.join(_spec(s) for s in specs)}); "
            "name each queue once, e.g. -q critical -q default"
        )


def _spec(spec: tuple[str, int | None]) -> str:
    return spec[0] if spec[1] is None else f"{spec[0]},{spec[1]}"


def fetch_order(specs: Sequence[tuple[str, int | None]]) -> list[str]:
    """The queues of one fetch, first to last: as given, or drawn by weight when weighted."""
    if all(w is None for _, w in specs):
        return [n for n, _ in specs]
    # Sidekiq's weighted fetch: each queue appears `weight` times, shuffled;
    # the first appearance decides the order of this fetch.
    pool = [n for n, w in specs for _ in range(w or 1)]
    random.shuffle(pool)
    return list(dict.fromkeys(pool))
