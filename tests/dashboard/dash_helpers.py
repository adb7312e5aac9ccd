"""Helpers of the dashboard tests: read what a page shows."""

from __future__ import annotations

import re

SECRET = "a test secret of at least 32 bytes"


def csrf_of(html: str) -> str:
    """The CSRF token in a page's forms."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no action form on the page"
    return found.group(1)


def drawn(html: str, chart: str, series: str) -> list[tuple[int, float]]:
    """(minute, value) of each bar of ``series`` in the SVG chart ``chart`` of a page."""
    start = html.index(f'data-chart="{chart}"')
    svg = html[start : html.index("</svg>", start)]
    bars = re.findall(
        rf'data-series="{re.escape(series)}" data-minute="(\d+)" data-value="([\d.]+)"', svg
    )
    return [(int(m), float(v)) for m, v in bars]


def line_values(html: str, chart: str, series: str) -> list[str]:
    """The per-minute values of line ``series`` in the SVG chart ``chart`` ('' for no data)."""
    start = html.index(f'data-chart="{chart}"')
    svg = html[start : html.index("</svg>", start)]
    found = re.search(rf'data-series="{re.escape(series)}" data-values="([^"]*)"', svg)
    assert found, f"no line {series!r} in chart {chart!r}"
    return found.group(1).split(",")
