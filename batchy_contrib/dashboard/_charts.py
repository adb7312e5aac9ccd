"""The dashboard's charts: per-minute series drawn as inline SVG on the server, no script needed.

Each chart is one ``<svg class="chart">`` with ``data-chart`` naming it; every
bar or line carries its numbers (``data-value`` per bar, ``data-values`` per
line) and a ``<title>`` a browser shows on hover, so a person reads the exact
count and a test reads what was drawn.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = ["Series", "bars", "lines", "sparkline"]

_WIDTH, _HEIGHT = 720, 180
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 8, 26, 22  # room for the legend and the axis labels


@dataclass(frozen=True, slots=True)
class Series:
    """One named series of per-minute values; ``css`` picks its colour (see dashboard.css)."""

    name: str
    values: Sequence[float]
    css: str = "s0"


def _scale(top: float) -> tuple[float, list[float]]:
    """A round maximum at or above ``top`` and the gridline values up to it."""
    if top <= 0:
        return 1.0, [0.0, 1.0]
    step = 10 ** math.floor(math.log10(top))
    for factor in (1, 2, 5, 10):
        if top <= step * factor * 4:
            step *= factor
            break
    steps = math.ceil(top / step)
    return step * steps, [step * i for i in range(steps + 1)]


def _number(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.3g}M"
    if value >= 10_000:
        return f"{value / 1000:.3g}k"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


def _clock(minute: int) -> str:
    return time.strftime("%H:%M", time.gmtime(minute * 60))


def _frame(kind: str, label: str, first: int, count: int, top: float, extra: str) -> list[str]:
    """The opening tag, gridlines, y labels and x labels (UTC, every 10 minutes)."""
    high, grid = _scale(top)
    plot_h = _HEIGHT - _TOP - _BOTTOM
    parts = [
        f'<svg class="chart" data-chart="{escape(kind)}" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
        f'role="img" aria-label="{escape(label)}" data-first-minute="{first}"{extra}>',
        f"<title>{escape(label)}</title>",
    ]
    for value in grid:
        y = _TOP + plot_h - value / high * plot_h
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_number(value)}</text>"
        )
    step = (_WIDTH - _LEFT - _RIGHT) / max(count, 1)
    for i in range(count):
        if (first + i) % 10 == 0:
            x = _LEFT + step * (i + 0.5)
            parts.append(
                f'<text class="axis" x="{x:.1f}" y="{_HEIGHT - 6}" text-anchor="middle">'
                f"{_clock(first + i)}</text>"
            )
    return parts


def bars(kind: str, label: str, first: int, series: Sequence[Series]) -> Markup:
    """Bars per minute, one series in front of the other (the later ones are parts of the first).

    ``first`` is the Unix minute of the first value. For processed and failed
    jobs: the failed bar stands inside the processed one.
    """
    count = max((len(s.values) for s in series), default=0)
    top = max((v for s in series for v in s.values), default=0)
    high, _ = _scale(top)
    totals = "".join(f' data-total-{escape(s.name)}="{_number(sum(s.values))}"' for s in series)
    parts = _frame(kind, label, first, count, top, totals)
    plot_h = _HEIGHT - _TOP - _BOTTOM
    step = (_WIDTH - _LEFT - _RIGHT) / max(count, 1)
    for s in series:
        for i, value in enumerate(s.values):
            if not value:
                continue
            h = value / high * plot_h
            x = _LEFT + step * i + step * 0.1
            parts.append(
                f'<rect class="bar {escape(s.css)}" data-series="{escape(s.name)}" '
                f'data-minute="{first + i}" data-value="{_number(value)}" x="{x:.1f}" '
                f'y="{_TOP + plot_h - h:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}">'
                f"<title>{_clock(first + i)} UTC: {_number(value)} {escape(s.name)}</title></rect>"
            )
    parts.append(_legend(series))
    parts.append("</svg>")
    return Markup("".join(parts))


def lines(kind: str, label: str, first: int, series: Sequence[Series]) -> Markup:
    """One line per series over the minutes, on one shared scale."""
    count = max((len(s.values) for s in series), default=0)
    top = max((v for s in series for v in s.values if not math.isnan(v)), default=0)
    high, _ = _scale(top)
    parts = _frame(kind, label, first, count, top, "")
    plot_h = _HEIGHT - _TOP - _BOTTOM
    step = (_WIDTH - _LEFT - _RIGHT) / max(count, 1)
    for s in series:
        points = []
        for i, value in enumerate(s.values):
            if math.isnan(value):
                continue  # a minute without data (no job ran): a gap, not a zero
            x, y = _LEFT + step * (i + 0.5), _TOP + plot_h - value / high * plot_h
            points.append(f"{x:.1f},{y:.1f}")
        values = ",".join("" if math.isnan(v) else _number(v) for v in s.values)
        parts.append(
            f'<polyline class="line {escape(s.css)}" data-series="{escape(s.name)}" '
            f'data-values="{values}" points="{" ".join(points)}">'
            f"<title>{escape(s.name)}: {_number(sum(v for v in s.values if not math.isnan(v)))} "
            "in all</title></polyline>"
        )
    parts.append(_legend(series))
    parts.append("</svg>")
    return Markup("".join(parts))


def sparkline(name: str, values: Sequence[float], css: str = "s0") -> Markup:
    """A small line of ``values`` with no axes, for a table cell."""
    width, height = 120, 24
    top = max(values, default=0) or 1
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - v / top * (height - 4):.1f}" for i, v in enumerate(values)
    )
    data = ",".join(_number(v) for v in values)
    return Markup(
        f'<svg class="spark" data-chart="spark-{escape(name)}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(name)}"><polyline class="line {escape(css)}" '
        f'data-series="{escape(name)}" data-values="{data}" points="{points}"/></svg>'
    )


def _legend(series: Sequence[Series]) -> str:
    parts = []
    x = _LEFT + 4
    for s in series:
        parts.append(
            f'<rect class="key {escape(s.css)}" x="{x}" y="4" width="10" height="10"/>'
            f'<text class="legend" x="{x + 14}" y="13">{escape(s.name)}</text>'
        )
        x += 22 + 7 * len(s.name)
    return "".join(parts)
