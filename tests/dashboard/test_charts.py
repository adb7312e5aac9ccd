"""The charts draw the numbers they are given; times and values are written for people."""

from __future__ import annotations

import math
import re
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchy_contrib.dashboard import DashboardError
from batchy_contrib.dashboard._charts import Series, _scale, bars, lines, sparkline
from batchy_contrib.dashboard._format import ago, args, duration, number, pretty, utc
from batchy_contrib.dashboard.serve import load_auth


@given(st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=60))
def test_bars_carry_every_value_and_fit_the_scale(values: list[int]) -> None:
    svg = str(bars("t", "label", 1000, [Series("processed", values, "ok")]))
    drawn = re.findall(r'data-minute="(\d+)" data-value="[^"]+" x="[^"]+" y="([^"]+)"', svg)
    assert [int(m) - 1000 for m, _ in drawn] == [i for i, v in enumerate(values) if v]
    assert all(float(y) >= 0 for _, y in drawn)  # inside the chart: the scale is >= the max
    high, grid = _scale(max(values))
    assert high >= max(values) and grid[-1] == high and len(grid) <= 6


def test_exact_values_in_the_markup() -> None:
    svg = str(bars("t", "jobs <per> minute", 28000000, [Series("failed", [0, 3, 12], "bad")]))
    assert 'aria-label="jobs &lt;per&gt; minute"' in svg
    assert re.findall(r'data-value="(\d+)"', svg) == ["3", "12"]
    assert 'data-total-failed="15"' in svg
    assert "<title>10:42 UTC: 12 failed</title>" in svg


def test_lines_leave_gaps_where_nothing_was_counted() -> None:
    svg = str(lines("r", "rounds", 0, [Series("rounds per job", [2.0, math.nan, 1.5])]))
    assert 'data-values="2,,1.5"' in svg
    points = re.search(r'points="([^"]*)"', svg)
    assert points and len(points.group(1).split()) == 2
    spark = str(sparkline("mail", [0, 4, 2]))
    assert 'data-values="0,4,2"' in spark and 'data-chart="spark-mail"' in spark


def test_formats() -> None:
    assert utc(0) == "-" and utc(86400) == "1970-01-02 00:00:00Z"
    assert [duration(s) for s in (0.25, 12.34, 250, 11000, 200000)] == [
        "250ms", "12.3s", "4m 10s", "3h 3m", "2d 7h",
    ]  # fmt: skip
    assert "5.0s ago" in ago(95, now=100) and "in 1m 0s" in ago(160, now=100)
    assert args([1, "x" * 100], limit=10) == '[1,"xxxxx…'
    assert pretty([101]) == "[101]" and pretty({"k": "v" * 70}).startswith("{\n")
    assert number(1234) == "1,234" and number(2.5) == "2.50" and number(math.nan) == "-"


def test_hostile_arguments_cost_a_listing_little_and_never_fail_a_page() -> None:
    # Nested deeper than the encoder goes: a payload the store read back, written
    # from a shallower stack (a listing of its state was a 500 while it existed).
    deep: list[object] = []
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    assert args(deep, limit=10) == "[[[[[[[[[…"
    assert pretty(deep).startswith("[[[[[[[[[[") and len(pretty(deep)) < 200
    # Deep, but within what the encoder goes to (Python 3.13's encoder goes far
    # deeper than 3.11's): indented, each level's line repeats every indent above.
    for depth in (101, 900):
        nested: list[object] = []
        for _ in range(depth):
            nested = [nested]
        assert pretty(nested).startswith("[[[[[[[[[[") and len(pretty(nested)) < 200
    shallow: list[object] = [1]
    for _ in range(99):
        shallow = [shallow]
    assert pretty(shallow).startswith("[\n  [\n")  # up to 100 levels: JSON, indented
    # Huge: a listing encodes no more than it shows.
    huge = [{"blob": "x" * 1000}] * 100_000
    started = time.perf_counter()
    assert args(huge) == '[{"blob":"' + "x" * 69 + "…"
    assert time.perf_counter() - started < 0.1  # the whole of it: about 0.5 s
    loop: list[object] = [1]
    loop.append(loop)
    assert args(loop).startswith("[1, [1, ") and pretty(loop).startswith("[1, [1, ")


def test_auth_specs_that_cannot_be_loaded() -> None:
    with pytest.raises(DashboardError) as error:
        load_auth("no_colon")
    assert str(error.value) == (
        "--auth 'no_colon' is not 'module:callable'; e.g. --auth app.security:operators_only"
    )
    with pytest.raises(DashboardError) as error:
        load_auth("no_such_module_here:check")
    assert str(error.value).startswith(
        "--auth 'no_such_module_here:check': cannot import module 'no_such_module_here'"
    )
    with pytest.raises(DashboardError) as error:
        load_auth("board_app:CALLS")
    assert str(error.value).startswith("--auth 'board_app:CALLS': board_app.CALLS is {")
    assert load_auth("board_app:make_backend").__name__ == "make_backend"
