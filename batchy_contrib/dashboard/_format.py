"""How the dashboard writes times, durations, arguments and counts for people (Jinja filters).

Times are shown relative to the page's moment ("3m ago", "in 2h") with the
exact UTC time in the element's ``title``; arguments as short JSON.
"""

from __future__ import annotations

import json
import math
import reprlib
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
    """Arguments as compact JSON, cut at ``limit`` characters.

    Encoded a piece at a time and no further than ``limit``: a listing of 50 jobs
    with 20 MB of arguments each encodes a few kB, not a gigabyte. A value nested
    deeper than the encoder can go (which the store may hold: it was written from
    a shallower stack, or by another process) is cut where the encoder stopped.
    """
    text = ""
    try:
        for piece in _LISTED.iterencode(values):
            text += piece
            if len(text) > limit:
                break
    except RecursionError:
        text += "…"
    except (TypeError, ValueError):  # a key JSON cannot write, a value that holds itself
        text = _BOUNDED.repr(values)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    """A value as JSON, indented when it is long (``repr`` for what JSON cannot say).

    Text no page can carry (a lone surrogate: a file name decoded with
    ``surrogateescape``) is shown as its escape, and a value nested too deep to
    encode as its outer levels, not a failed page.
    """
    if _deeper_than(value, _PRETTY_LEVELS):
        # Indented JSON writes every level's indent on each of its lines: a payload
        # 4,000 levels deep is 8 MB of page (Python 3.13's encoder goes that deep;
        # before, it stopped at the recursion limit). Its outer levels are enough.
        return _BOUNDED.repr(value).encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        text = json.dumps(value, default=repr, ensure_ascii=False)
        if len(text) > 60:
            text = json.dumps(value, indent=2, default=repr, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        # Nested deeper than the encoder goes (see args), a page shows the value's
        # outer levels, not a 500: repr would recurse as deep.
        text = _BOUNDED.repr(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_PRETTY_LEVELS = 100  # deeper values are shown by _BOUNDED, as its first 20 levels


def _deeper_than(value: Any, levels: int) -> bool:
    """Whether lists, tuples and dicts in ``value`` nest more than ``levels`` deep.

    Level by level, without recursion, and no further than ``levels`` (a value that
    holds itself is deeper than any). A payload is a tree (it was JSON), so this
    reads each part once; past a million parts it stops and answers no."""
    nests = (dict, list, tuple)
    level, budget = ([value] if isinstance(value, nests) else []), 1_000_000
    for _ in range(levels):
        inner: list[Any] = []
        for part in level:
            parts = part.values() if isinstance(part, dict) else part
            budget -= len(parts)
            inner += [p for p in parts if isinstance(p, nests)]
        if not inner or budget < 0:
            return False
        level = inner
    return True


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


# Listings' arguments, encoded piece by piece (see args).
_LISTED = json.JSONEncoder(separators=(",", ":"), default=repr)
# What cannot be JSON: a repr bounded in depth and length, so no value recurses.
_BOUNDED = reprlib.Repr()
_BOUNDED.maxlevel, _BOUNDED.maxstring, _BOUNDED.maxother = 20, 500, 500
_BOUNDED.maxlist = _BOUNDED.maxtuple = _BOUNDED.maxdict = _BOUNDED.maxset = 100

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
