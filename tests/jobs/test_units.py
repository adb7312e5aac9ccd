"""Pure pieces: Sidekiq's backoff, cron schedules, queue weights, payload encoding."""

from __future__ import annotations

import calendar
import datetime as dt

import pytest

from batchy.jobs import Claimed, Cron, Every, JSONSerializer, PayloadError, parse_queues
from batchy.jobs import sidekiq_backoff as backoff
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
        ("0 12 * * 7", "2026-01-01T00:00:00", "2026-01-04T12:00:00"),  # 7 is Sunday
        ("0 0 13 * 5", "2026-01-01T00:00:00", "2026-01-02T00:00:00"),  # day OR weekday
    ],
)
def test_cron_next_after(expr: str, after: str, expected: str) -> None:
    assert Cron(expr).next_after(ts(after)) == ts(expected)


def test_every_is_aligned_and_strictly_after() -> None:
    every = Every(0.2)
    t = 1795327784.6000001
    for _ in range(100):
        nxt = every.next_after(t)
        assert nxt > t
        t = nxt


def test_parse_queues() -> None:
    assert parse_queues(["critical,2", "default", ("low", 1)]) == [
        ("critical", 2),
        ("default", None),
        ("low", 1),
    ]


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
