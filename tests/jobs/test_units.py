"""Pure pieces: Sidekiq's backoff, cron schedules, queue weights, payload encoding, value classes."""

from __future__ import annotations

import asyncio
import calendar
import dataclasses
import datetime as dt
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchy.jobs import (
    Backend,
    Claimed,
    Cron,
    Every,
    JobEvent,
    JSONSerializer,
    Outcome,
    PayloadError,
    parse_queues,
)
from batchy.jobs import sidekiq_backoff as backoff
from batchy.jobs._frozen import quick_init
from batchy.jobs._model import Message, decode, encode


def ts(text: str) -> float:
    return float(calendar.timegm(dt.datetime.fromisoformat(text).timetuple()))


def test_sidekiq_backoff_bounds() -> None:
    for count in range(25):
        for _ in range(20):
            delay = backoff(count)
            assert count**4 + 15 <= delay <= count**4 + 15 + 10 * (count + 1)
    total = sum(count**4 + 15 for count in range(25))
    assert 19 * 86400 < total < 21 * 86400  # about 20 days of retries


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("* * * * *", "2026-01-01T10:00:30", "2026-01-01T10:01:00"),
        ("*/15 * * * *", "2026-01-01T10:16:00", "2026-01-01T10:30:00"),
        ("0 3 * * *", "2026-01-01T03:00:00", "2026-01-02T03:00:00"),
        ("30 9 * * 1-5", "2026-01-02T10:00:00", "2026-01-05T09:30:00"),  # Fri -> Mon
        ("0 0 1 * *", "2026-01-15T00:00:00", "2026-02-01T00:00:00"),
        ("0 0 29 2 *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),
        # 2100 is not a leap year: eight years to the next February 29th.
        ("0 0 29 2 *", "2096-03-01T00:00:00", "2104-02-29T00:00:00"),
        ("0 12 * * 7", "2026-01-01T00:00:00", "2026-01-04T12:00:00"),  # 7 is Sunday
        ("0 0 13 * 5", "2026-01-01T00:00:00", "2026-01-02T00:00:00"),  # day OR weekday
        ("30/1 * * * *", "2026-01-01T10:30:00", "2026-01-01T10:31:00"),  # N/1 was just N
        ("30/2 * * * *", "2026-01-01T10:59:00", "2026-01-01T11:30:00"),
    ],
)
def test_cron_next_after(expr: str, after: str, expected: str) -> None:
    assert Cron(expr).next_after(ts(after)) == ts(expected)


_FIELD = st.one_of(
    st.just("*"),
    st.integers(1, 9).map(lambda n: f"*/{n}"),
    st.lists(st.integers(0, 31), min_size=1, max_size=3).map(lambda v: ",".join(map(str, v))),
)


@given(
    minute=_FIELD.filter(
        lambda f: all(int(v) <= 59 for v in f.replace("*/", "").split(",") if v != "*")
    ),
    hour=_FIELD.filter(
        lambda f: all(int(v) <= 23 for v in f.replace("*/", "").split(",") if v != "*")
    ),
    day=st.sampled_from(["*", "1", "15", "28", "29", "30", "31", "29,30"]),
    month=st.sampled_from(["*", "2", "2,4", "4,6,9,11", "12"]),
    weekday=st.sampled_from(["*", "0", "1-5", "6,0"]),
    after=st.floats(0, 9.5e9),  # 1970 to 2271, across the centuries that are not leap years
)
def test_cron_next_after_finds_the_first_matching_minute(
    minute: str, hour: str, day: str, month: str, weekday: str, after: float
) -> None:
    expr = f"{minute} {hour} {day} {month} {weekday}"
    try:
        cron = Cron(expr)
    except Exception:  # an expression refused at declaration never reaches a worker
        return
    tick = cron.next_after(after)  # an accepted expression always has a next tick
    at = dt.datetime.fromtimestamp(tick, dt.UTC)
    assert tick > after and at.second == 0
    assert at.minute in cron.minutes and at.hour in cron.hours and at.month in cron.months
    dom, dow = at.day in cron.days, at.isoweekday() % 7 in cron.weekdays
    assert (dom and dow) if "*" in (day, weekday) else (dom or dow)


def test_every_is_aligned_and_strictly_after() -> None:
    every = Every(0.2)
    t = 1795327784.6000001
    for _ in range(100):
        nxt = every.next_after(t)
        assert nxt > t
        t = nxt


def test_parse_queues() -> None:
    assert parse_queues(["critical,2", "default,1", ("low", 1)]) == [
        ("critical", 2),
        ("default", 1),
        ("low", 1),
    ]
    assert parse_queues(["critical", "default"]) == [("critical", None), ("default", None)]
    # Sidekiq's -q critical,2 -q default: default is drawn with weight 1.
    assert parse_queues(["critical,2", "default"]) == [("critical", 2), ("default", None)]


def test_payload_round_trip() -> None:
    s = JSONSerializer()
    msg = Message("id1", "q", "job.name", [1, "a"], {"k": [1]}, attempt=2, retries=3, error="E")
    back = decode(Claimed("id1", "q", encode(msg, s)), s)
    assert back == msg


@pytest.mark.parametrize(
    "extra",
    ['"enqueued_at": "soon"', '"enqueued_at": [1]', '"enqueued_at": 1e400',
     '"enqueued_at": 1' + "0" * 400, '"error": 7', '"traceback": {}',
     '"retries": "3"', '"headers": 5'],
)  # fmt: skip
def test_metadata_of_the_wrong_type_is_dropped_not_fatal(extra: str) -> None:
    """A hand-written payload's odd metadata: the job still runs, with the field unset.

    A non-numeric enqueued_at raised TypeError out of decode, past the runner's
    payload check: the run crashed, its lease was dropped and the job came back
    after every lease, never dead.
    """
    payload = '{"job": "x", "args": [1], ' + extra + "}"
    message = decode(Claimed("odd", "q", payload), JSONSerializer())
    assert (message.job, message.args, message.enqueued_at) == ("x", [1], 0.0)
    assert message.error is None and message.traceback is None and message.retries is None
    assert message.headers == {}


@pytest.mark.parametrize("payload", ["", "{", "[]", '{"job": 1}', '{"job": "x", "args": {}}'])
def test_bad_payloads(payload: str) -> None:
    with pytest.raises(PayloadError, match="job bad on queue 'q'"):
        decode(Claimed("bad", "q", payload), JSONSerializer())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


def _read(read: Callable[[str], Any], text: str) -> tuple[str, Any]:
    try:
        return "value", read(text)
    except ValueError as error:
        return type(error).__name__, str(error)


@given(
    value=JSON,
    before=st.sampled_from(["", " ", "\n\t"]),
    after=st.sampled_from(["", " ", "x", "1", "}", ' {"a":1}']),
)
def test_the_serializer_reads_a_payload_as_json_loads_does(
    value: Any, before: str, after: str
) -> None:
    """It calls json's scanner itself (a worker reads a payload per job): the same value
    or the same error as json.loads, for spaces around the JSON and text after it."""
    text = before + json.dumps(value) + after
    assert _read(JSONSerializer().loads, text) == _read(json.loads, text)


@given(text=st.text(max_size=20))
def test_the_serializer_fails_on_what_is_not_json_as_json_loads_does(text: str) -> None:
    assert _read(JSONSerializer().loads, text) == _read(json.loads, text)


def test_a_quick_init_class_is_still_the_same_frozen_dataclass() -> None:
    """Outcome, Claimed and JobEvent get a quicker __init__ (quick_init): the same
    parameters, defaults and fresh default factories, still frozen and equal by value."""
    before = dataclasses.dataclass(frozen=True, slots=True)(_Shape)
    after = quick_init(dataclasses.dataclass(frozen=True, slots=True)(_Shape2))
    assert str(inspect.signature(after)) == str(inspect.signature(before))
    a, b = after("x"), after("x")
    assert (a.name, a.size, a.tags) == ("x", 1, [])
    assert a == b and a.tags is not b.tags and repr(a) == "_Shape2(name='x', size=1, tags=[])"
    assert after("y", 2, ["t"]) == after(name="y", tags=["t"], size=2)
    assert dataclasses.replace(a, size=3).size == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.size = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
        after()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        after("x", colour=1)  # type: ignore[call-arg]
    for cls in (Outcome, Claimed, JobEvent):
        assert cls.__init__.__qualname__ == f"{cls.__name__}.__init__"
        # Its annotations resolve in the class's module, as a dataclass's do.
        hints = typing.get_type_hints(cls.__init__)
        assert set(hints) == {f.name for f in dataclasses.fields(cls)} | {"return"}
        assert inspect.signature(cls, eval_str=True).parameters["id"].annotation is str
    assert JobEvent("i", "j", "q", 1, "done").headers == {}


def test_quick_init_refuses_a_class_it_would_change() -> None:
    with pytest.raises(TypeError, match="not a frozen dataclass with slots"):
        quick_init(dataclasses.dataclass(slots=True)(_Shape3))
    with pytest.raises(TypeError, match="__post_init__ would not be called"):
        quick_init(dataclasses.dataclass(frozen=True, slots=True)(_Checked))


class _Checked:
    name: str

    def __post_init__(self) -> None:
        raise AssertionError("never made")


class _Shape:
    name: str
    size: int = 1
    tags: list[str] = dataclasses.field(default_factory=list)


class _Shape2:
    name: str
    size: int = 1
    tags: list[str] = dataclasses.field(default_factory=list)


class _Shape3:
    name: str


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/jobs", "postgresql://app:***@db:5432/jobs"),
        ("redis://:s3cret@cache:6379/1", "redis://:***@cache:6379/1"),
        (
            "postgresql://db/jobs?password=s3cret&sslmode=require",
            "postgresql://db/jobs?password=***&sslmode=require",
        ),
        ("host=db password=s3cret user=app", "host=db password=*** user=app"),
        ("host=db password='s3 cret' user=app", "host=db password=*** user=app"),
        # libpq reads `a\ b` unquoted as "a b": the whole of it is the password
        ("host=db password=s3\\ cret user=app", "host=db password=*** user=app"),
        ("host=db PASSWORD = s3cret", "host=db PASSWORD = ***"),
        ("/var/lib/jobs.db", "/var/lib/jobs.db"),
        # urlsplit ends the host at ? and #: such a password was shown whole
        ("postgresql://app:hunter#2@db:5432/jobs", "postgresql://app:***@db:5432/jobs"),
        ("postgresql://app:s3cr?t@db/jobs", "postgresql://app:***@db/jobs"),
        ("redis://:a/b@cache:6379/1", "redis://:***@cache:6379/1"),
        ("postgresql://app:p@ss@db/jobs", "postgresql://app:***@db/jobs"),
        ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
        # a key=value string was read as a URL when its password held ://, and shown whole
        ("host=db password=s3c://ret user=app", "host=db password=*** user=app"),
    ],
)
def test_a_stores_location_is_shown_without_its_password(location: str, shown: str) -> None:
    assert Backend.redact(location) == shown


async def test_a_loop_blocked_past_a_store_calls_limit_is_not_taken_for_no_answer() -> None:
    # A handler that blocked the loop past the lease made the turn's timer fire
    # before the turn could read the answer waiting in its socket: the store was
    # reported unreachable, the turn's outcomes sent again, its claims abandoned.
    import time

    from batchy.jobs._outage import within

    async def answer() -> str:
        await asyncio.sleep(0.05)  # the store answers in time...
        for _ in range(3):
            await asyncio.sleep(0)  # ...and reading it takes a few steps of the loop
        return "ok"

    async def handler() -> None:
        await asyncio.sleep(0.01)
        time.sleep(0.3)  # blocks the loop past the call's limit

    blocking = asyncio.create_task(handler())
    assert await within(answer(), 0.1, lambda: "no answer") == "ok"
    await blocking


@given(
    password=st.text(
        st.characters(codec="ascii", exclude_characters="@/\x00", min_codepoint=33), min_size=6
    ),
    scheme=st.sampled_from(["postgresql", "redis", "rediss"]),
    query=st.sampled_from(["", "?sslmode=require", "#frag"]),
)
def test_no_password_of_a_url_survives_redaction(password: str, scheme: str, query: str) -> None:
    # The class of the ? and # passwords above: whatever characters a password
    # holds (short of @ and /, which a URL must escape), none of it is shown.
    location = f"{scheme}://app:{password}@db.internal:5432/jobs{query}"
    shown = Backend.redact(location)
    assert password not in shown, shown
    assert shown.startswith(f"{scheme}://app:***@db.internal:5432/jobs")


@pytest.mark.parametrize(
    ("poll", "longest"),
    [(0.01, 0.1), (0.05, 0.5), (0.5, 1.0), (1.0, 1.0), (2.0, 2.0), (60.0, 60.0)],
)
def test_a_workers_wait_between_tries_to_a_store_that_is_down_stops_growing_at_a_second(
    poll: float, longest: float
) -> None:
    # It grew to ten poll intervals (up to 30 s), and a worker slept that out with
    # the store back: a job enqueued then waited up to ten polls to start. Now it
    # doubles from a poll interval up to a second (ten polls if less, one if more).
    import logging

    from batchy.jobs._outage import Outage

    outage = Outage("w", poll)
    logging.getLogger("batchy.jobs").disabled = True  # the outage's line
    try:
        waits = [outage.failed(ConnectionError("refused")) for _ in range(40)]
    finally:
        logging.getLogger("batchy.jobs").disabled = False
    assert 0.75 * poll <= waits[0] <= poll
    assert all(0.75 * longest <= wait <= longest for wait in waits[-10:]), waits
    assert max(waits) <= longest
