"""Which delays and run times the job system accepts: finite seconds >= 0, or an aware datetime.

Every door a time comes in by checks it here (``options(delay=, at=)``, a
:class:`JobCall`, ``Retry(delay=)``, a backoff's answer, a store's envelopes and
outcomes), because one NaN that reaches a store fails its whole round trip, and
with it the outcomes of every other job in that round trip.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers

from ._errors import DelayError

__all__ = ["MAX_SPAN", "check_at", "check_delay", "delay_problem", "span_problem"]

_SECONDS = "a finite number of seconds >= 0 (an int or float, e.g. {name}=60)"
_TIME = "a Unix time in seconds (e.g. time.time() + 60) or an aware datetime"


def delay_problem(value: object) -> str | None:
    """What is wrong with ``value`` as seconds (``"is not finite"``), or None if it is fine."""
    # Every enqueue and outcome comes through here: plain floats and ints skip the
    # slow abstract-class check.
    if type(value) is float:
        return _number_problem(value)
    if type(value) is int and 0 <= value < _HUGE:
        return None
    # bool is an int to Python, but delay=True is a mistake, not one second.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"is a {type(value).__name__}, not a number"
    try:
        return _number_problem(float(value))
    except OverflowError:  # a huge int or Fraction: due times would overflow
        return "is too large"


_HUGE = 2**63

#: The longest a store keeps something for a time (a result, a unique key): ten
#: years. Stores count these in milliseconds, and Redis refuses a time to live
#: that Lua writes in exponent form (1e+14), failing the script half-way.
MAX_SPAN = 10 * 365 * 86400


def span_problem(value: object) -> str | None:
    """:func:`delay_problem` for a time something is kept, which may not pass ``MAX_SPAN``."""
    problem = delay_problem(value)
    if problem is None and value > MAX_SPAN:  # type: ignore[operator]  # a Real, checked
        return f"is more than ten years ({MAX_SPAN:,} s)"
    return problem


def _number_problem(value: float) -> str | None:
    if 0 <= value < math.inf:  # False for NaN
        return None
    if math.isnan(value) or math.isinf(value):
        return "is not finite"
    return "is negative"


def check_delay(value: object, what: str, name: str = "delay", hint: str = "") -> float:
    """``value`` as float seconds; a :class:`DelayError` naming ``what`` and ``name`` if not."""
    problem = delay_problem(value)
    if problem is not None:
        raise DelayError(
            f"{what}: {name}={value!r} {problem}; pass {_SECONDS.format(name=name)}{hint}"
        )
    return float(value)  # type: ignore[arg-type]  # a Real, checked above


def check_at(value: object, what: str) -> float:
    """``value`` (a Unix time or an aware datetime) as a Unix time; a :class:`DelayError` if not."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            # A naive datetime means local time to Python and UTC to most servers:
            # guessing would run the job hours early or late.
            raise DelayError(
                f"{what}: at={value!r} has no time zone; pass an aware datetime "
                "(datetime.now(UTC) + timedelta(hours=1)) or a Unix time"
            )
        return value.timestamp()
    problem = delay_problem(value)
    if problem is not None:
        raise DelayError(f"{what}: at={value!r} {problem}; pass {_TIME}")
    return float(value)  # type: ignore[arg-type]  # a Real, checked above
