"""How the dashboard writes times, durations, arguments and counts for people (Jinja filters).

Times are shown relative to the page's moment ("3m ago", "in 2h") with the
exact UTC time in the element's ``title``; arguments as short JSON.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from typing import Any

from markupsafe import Markup, escape

__all__ = ["FILTERS", "ago", "args", "clip", "duration", "number", "path_part", "utc"]


def utc(when: float | None) -> str:
    """``2026-01-02 10:00:00Z``; a dash for no time."""
    if when is None or not when:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when)) + "Z"


def duration(seconds: float | None) -> str:
    """``850ms``, ``12.3s``, ``4m 10s``, ``3h 5m``, ``2d 4h``."""
    if seconds is None or math.isnan(seconds):
        return "-"
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60)}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60)}m"
    return f"{int(seconds // 86400)}d {int(seconds % 86400 // 3600)}h"


def ago(when: float | None, now: float | None = None) -> Markup:
    """A ``<time>`` element: "5s ago" or "in 2m", its exact UTC time on hover."""
    if when is None or not when:
        return Markup("-")
    now = time.time() if now is None else now
    delta = when - now
    text = f"in {duration(delta)}" if delta > 0.5 else f"{duration(delta)} ago"
    return Markup(f'<time datetime="{utc(when)}" title="{utc(when)}">{escape(text)}</time>')


def args(values: Any, limit: int = 80) -> str:
    """Arguments as compact JSON, cut at ``limit`` characters."""
    try:
        text = json.dumps(values, separators=(",", ":"), default=repr)
    except (TypeError, ValueError):
        text = repr(values)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    """A value as JSON, indented when it is long (``repr`` for what JSON cannot say).

    Text no page can carry (a lone surrogate: a file name decoded with
    ``surrogateescape``) is shown as its escape, not a failed page.
    """
    try:
        text = json.dumps(value, default=repr, ensure_ascii=False)
        if len(text) > 60:
            text = json.dumps(value, indent=2, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def clip(text: str | None, limit: int = 500) -> str:
    """``text`` cut at ``limit`` characters, for lists (the job's page shows it whole)."""
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def path_part(text: str) -> str:
    """``text`` as one segment of a URL's path: a job id with / ? # % in it stays itself."""
    return urllib.parse.quote(text, safe="")


def number(value: float | None) -> str:
    """``1,234``, ``2.5``; a dash for nothing to show (None, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and value != int(value):
        return f"{value:,.2f}"
    return f"{int(value):,}"


FILTERS = {
    "utc": utc,
    "duration": duration,
    "ago": ago,
    "args": args,
    "pretty": pretty,
    "number": number,
    "clip": clip,
    "path_part": path_part,
}
