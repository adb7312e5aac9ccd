"""Schedules of periodic jobs: five-field cron expressions and fixed intervals, in UTC.

A schedule answers one question, ``next_after(t)``: the first tick strictly after
Unix time ``t``. Workers enqueue each tick with a unique key (job name + tick
time), so however many workers see a tick, the store enqueues it once.
"""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Protocol

from ._errors import JobDefinitionError

__all__ = ["Cron", "Every", "Schedule"]

#: The longest each month gets (February 29th in leap years).
_LONGEST = {m: 29 if m == 2 else 30 if m in (4, 6, 9, 11) else 31 for m in range(1, 13)}

#: Days a tick is looked for: the longest wait of an expression that ticks at all
#: is eight years, from a February 29th to the next across a century that is not
#: a leap year (2096 to 2104), so five years are too few.
_HORIZON = 366 * 8 + 1

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 7))


class Schedule(Protocol):
    """Something that knows the next tick after a time."""

    def next_after(self, t: float) -> float: ...


class Every:
    """A tick every ``seconds`` seconds, aligned to the Unix epoch (so all workers agree)."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise JobDefinitionError(
                f"Every({seconds!r}): the interval must be a positive number of seconds, "
                "e.g. Every(60)"
            )
        self.seconds = float(seconds)

    def __repr__(self) -> str:
        return f"Every({self.seconds:g})"

    def next_after(self, t: float) -> float:
        n = t // self.seconds + 1
        while n * self.seconds <= t:  # float rounding can land on or before t
            n += 1
        return n * self.seconds


def _digits(text: str) -> bool:
    # str.isdigit() also takes '²' (which int() refuses) and other scripts' digits.
    return text.isascii() and text.isdigit()


def _parse_field(text: str, name: str, lo: int, hi: int, expr: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        step = 1
        part = item
        if "/" in item:
            part, step_text = item.split("/", 1)
            step = int(step_text) if _digits(step_text) and int(step_text) > 0 else -1
        if part == "*":
            start, stop = lo, hi
        elif "-" in part:
            a, b = part.split("-", 1)
            start, stop = (int(a), int(b)) if _digits(a) and _digits(b) else (-1, -1)
        elif _digits(part):
            start = stop = int(part)
            if "/" in item:  # N/S: from N to the highest value, every S (N/1 too)
                stop = hi
        else:
            start, stop = -1, -1
        if step < 1 or not lo <= start <= stop <= hi:
            raise JobDefinitionError(
                f"cron expression {expr!r}: the {name} field {text!r} is not valid; use *, "
                f"*/N, A-B, A-B/N, or a list of them, with values from {lo} to {hi}"
            )
        values.update(range(start, stop + 1, step))
    return frozenset(values)


class Cron:
    """A five-field cron expression (minute hour day month weekday, weekday 0 = Sunday), UTC.

    ``Cron("*/5 * * * *")`` ticks every five minutes. As in cron, when both day and
    weekday are restricted a day matching either one ticks.
    """

    def __init__(self, expr: str) -> None:
        parts = expr.split()
        if len(parts) != 5:
            raise JobDefinitionError(
                f"cron expression {expr!r} has {len(parts)} fields, expected 5 "
                "(minute hour day month weekday), e.g. '0 3 * * *' for 03:00 UTC daily"
            )
        self.expr = expr
        sets = [
            _parse_field(text, name, lo, hi, expr)
            for text, (name, lo, hi) in zip(parts, _FIELDS, strict=True)
        ]
        self.minutes, self.hours, self.days, self.months, weekdays = sets
        self.weekdays = frozenset(d % 7 for d in weekdays)  # 7 is Sunday too
        self._any_day = parts[2] == "*"
        self._any_weekday = parts[4] == "*"
        # With any weekday, only the day field picks days: it must exist in some month
        # (a weekday list alone, or with a day list, always matches some day).
        if self._any_weekday and not any(d <= _LONGEST[m] for m in self.months for d in self.days):
            raise JobDefinitionError(
                f"cron expression {expr!r} never ticks: no month in the month field "
                f"{parts[3]!r} has a day in the day field {parts[2]!r} (e.g. February 30th); "
                "fix the day or month field"
            )

    def __repr__(self) -> str:
        return f"Cron({self.expr!r})"

    def _day_matches(self, day: dt.date) -> bool:
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self._any_day or self._any_weekday:
            return dom and dow
        return dom or dow

    def next_after(self, t: float) -> float:
        start = dt.datetime.fromtimestamp(t, dt.UTC).replace(second=0, microsecond=0)
        start += dt.timedelta(minutes=1)
        day = start.date()
        # Walk days (at most _HORIZON), then hours and minutes in a day.
        for _ in range(_HORIZON):
            if day.month in self.months and self._day_matches(day):
                first = start if day == start.date() else None
                for hour in sorted(self.hours):
                    if first is not None and hour < first.hour:
                        continue
                    for minute in sorted(self.minutes):
                        if first is not None and hour == first.hour and minute < first.minute:
                            continue
                        moment = dt.datetime(day.year, day.month, day.day, hour, minute)
                        return float(calendar.timegm(moment.timetuple()))
            day += dt.timedelta(days=1)
        raise JobDefinitionError(
            f"cron expression {self.expr!r} never ticks (e.g. February 30th); fix the day "
            "or month field"
        )
