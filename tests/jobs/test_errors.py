"""Every error message of batchy.jobs: it names the job, queue or value and suggests a fix."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batchy
from batchy.jobs import (
    ConfigError,
    Cron,
    DeadJobError,
    Envelope,
    Every,
    JobDefinitionError,
    JobError,
    MemoryBackend,
    Queue,
    ResultNotKept,
    SerializationError,
    SQLiteBackend,
    Worker,
    parse_queues,
)


@pytest.fixture
def queue() -> Queue:
    return Queue(MemoryBackend())


def test_errors_are_batchy_errors() -> None:
    for cls in (ConfigError, JobDefinitionError, SerializationError, DeadJobError, ResultNotKept):
        assert issubclass(cls, JobError) and issubclass(cls, batchy.BatchyError)
    assert issubclass(SerializationError, TypeError)


@pytest.mark.parametrize("public", ["batchy.jobs", "batchy_contrib.jobs.postgres"])
def test_errors_show_their_public_path(public: str) -> None:
    # A traceback names the class as the user imports and catches it
    # (batchy.jobs.SerializationError), not the private module that defines it.
    import importlib
    import pickle

    module = importlib.import_module(public)
    errors = [
        obj
        for name in module.__all__
        if isinstance(obj := getattr(module, name), type) and issubclass(obj, BaseException)
    ]
    assert errors
    for cls in errors:
        if not cls.__module__.startswith("batchy"):
            continue  # a driver's own error, re-exported as a convenience
        assert f"{cls.__module__}.{cls.__qualname__}" == f"{public}.{cls.__name__}"
        assert pickle.loads(pickle.dumps(cls)) is cls  # the path is importable


async def test_unserializable_argument(queue: Queue) -> None:
    @queue.job(name="mail.send")
    async def send(to: object) -> None: ...

    with pytest.raises(SerializationError) as info:
        await send.enqueue({1, 2})
    message = str(info.value)
    assert "'mail.send'" in message and "queue 'default'" in message
    assert "plain JSON values" in message and "nothing was enqueued" in message
    assert "an id instead of an object" in message


async def test_nan_is_not_json(queue: Queue) -> None:
    @queue.job
    async def f(x: float) -> None: ...

    with pytest.raises(SerializationError, match="do not serialize"):
        await f.enqueue(float("nan"))


def test_duplicate_job_name(queue: Queue) -> None:
    @queue.job(name="same")
    async def a() -> None: ...

    with pytest.raises(JobDefinitionError, match=r"'same' is declared twice.*pass name="):

        @queue.job(name="same")
        async def b() -> None: ...


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"retries": -1}, "retries=-1 must be an int >= 0"),
        ({"timeout": 0}, "timeout=0 must be a positive number of seconds"),
        ({"backoff": 5}, "backoff=5 must be a function"),
        ({"queue": "bad queue!"}, "queue name 'bad queue!' is not valid"),
    ],
)
def test_bad_job_options(queue: Queue, options: dict[str, object], expected: str) -> None:
    with pytest.raises(JobDefinitionError, match=expected):
        queue.job(**options)(_handler)  # type: ignore[arg-type]


async def _handler() -> None: ...


def test_handler_must_be_a_generator_or_async(queue: Queue) -> None:
    with pytest.raises(batchy.UsageError, match="neither"):
        queue.job(lambda: None)


def test_bad_enqueue_options(queue: Queue) -> None:
    job = queue.job(name="j")(_handler)
    with pytest.raises(JobDefinitionError, match="pass delay= or at=, not both"):
        job.options(delay=1, at=2)
    with pytest.raises(JobDefinitionError, match="not milliseconds"):
        job.options(at=1_700_000_000_000)
    with pytest.raises(JobDefinitionError, match="'j': retries=-2 must be an int >= 0"):
        job.options(retries=-2)
    with pytest.raises(JobDefinitionError, match="queue name '' is not valid"):
        job.options(queue="")


def test_bad_backend() -> None:
    with pytest.raises(JobDefinitionError, match=r"expected a batchy\.jobs Backend"):
        Queue(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="synchronous='FAST' is not a SQLite level"):
        SQLiteBackend(":memory:", synchronous="FAST")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("* * * *", "has 4 fields, expected 5"),
        ("61 * * * *", "the minute field '61' is not valid"),
        ("* * * * mon", "the weekday field 'mon' is not valid"),
        ("*/0 * * * *", "the minute field"),
    ],
)
def test_bad_cron(expr: str, expected: str) -> None:
    with pytest.raises(JobDefinitionError, match=expected):
        Cron(expr)


def test_cron_that_never_ticks() -> None:
    with pytest.raises(JobDefinitionError, match="never ticks"):
        Cron("0 0 30 2 *").next_after(0)


def test_bad_interval() -> None:
    with pytest.raises(JobDefinitionError, match=r"Every\(0\).*positive"):
        Every(0)


def test_bad_worker_options(queue: Queue) -> None:
    with pytest.raises(ConfigError, match="concurrency=0 must be an int >= 1"):
        Worker(queue, concurrency=0)
    with pytest.raises(ConfigError, match="lease=0"):
        Worker(queue, lease=0)
    with pytest.raises(ConfigError, match="heartbeat=5 must be > 0 and shorter than lease=2"):
        Worker(queue, lease=2, heartbeat=5)
    with pytest.raises(ConfigError, match="weight '0' is not a positive integer"):
        parse_queues(["critical,0"])


async def test_handle_errors(queue: Queue) -> None:
    @queue.job(retries=0)
    async def boom() -> None:
        raise ValueError("kaput")

    @queue.job(keep_result=0)
    async def quiet() -> int:
        return 1

    @queue.job
    async def waits() -> None: ...

    dead = await boom.enqueue()
    gone = await quiet.enqueue()
    await Worker(queue, burst=True, poll_interval=0.01).run()
    with pytest.raises(DeadJobError, match=f"job {dead.id} is dead: ValueError: kaput"):
        await dead.result()
    with pytest.raises(ResultNotKept, match="set keep_result="):
        await gone.result()
    pending = await waits.enqueue()
    with pytest.raises(TimeoutError, match=r"still queued after 0\.05s.*batchy info"):
        await pending.result(timeout=0.05)
    await asyncio.sleep(0)


def test_unknown_job_type_option(queue: Queue) -> None:
    from batchy.jobs import JobType

    with pytest.raises(JobDefinitionError, match=r"unknown option\(s\) \['colour'\]"):
        JobType(queue, _handler, colour="red")


def test_app_spec_must_name_a_queue() -> None:
    from batchy.__main__ import load_app

    with pytest.raises(ConfigError, match=r"is not 'module:attribute'.*BATCHY_APP"):
        load_app("just_a_module")


def test_retry_message() -> None:
    from batchy.jobs import Retry

    assert str(Retry(delay=60, reason="API down")) == "API down (retry in 60s)"
    assert str(Retry()) == "retry requested"


async def test_a_dict_key_json_would_turn_into_text_is_refused_at_enqueue(queue: Queue) -> None:
    @queue.job
    async def tally(counts: dict[int, int]) -> None:
        return None

    with pytest.raises(SerializationError) as caught:
        await tally.enqueue({"ok": [1, {2: 3}]})
    message = str(caught.value)
    assert "tally" in message and "(queue 'default')" in message
    assert "args[0]['ok'][1] has the key 2 (int)" in message
    assert "use str keys" in message and "nothing was enqueued" in message
    with pytest.raises(SerializationError, match=r"kwargs\['counts'\] has the key 1"):
        await tally.enqueue(counts={1: 1})
    worker = Worker(queue, burst=True)
    await worker.run()
    assert worker.processed == 0


async def test_a_handler_that_puts_a_number_key_in_its_argument_still_fails_cleanly(
    queue: Queue,
) -> None:
    # The failure's payload was checked as an enqueue: its SerializationError
    # crashed the runner, and the job stayed running, to run again and again.
    @queue.job(retries=0)
    async def spoil(counts: dict[str, int]) -> None:
        counts[1] = 1  # type: ignore[index]
        raise ValueError("spoilt")

    handle = await spoil.enqueue({"a": 1})
    await Worker(queue, burst=True, poll_interval=0.01).run()
    (dead,) = await queue.backend.dead_jobs()
    assert dead.id == handle.id and "ValueError: spoilt" in dead.reason


async def test_a_sharded_cursor_with_a_number_key_fails_its_shard_naming_it(
    queue: Queue,
) -> None:
    # It crashed the runner (its progress refused "cannot be enqueued", then the
    # failure's payload likewise) and the shard stayed running, forever retaken.
    @queue.sharded(shards=1, name="walk", retries=0)
    async def walk(shard: int, shards: int, cursor: object) -> object:
        return {0: 5} if cursor is None else None

    await walk.start()
    await Worker(queue, burst=True, poll_interval=0.01).run()
    (dead,) = await queue.backend.dead_jobs()
    assert (
        "sharded job 'walk' run 'default' shard 0: the handler returned the cursor {0: 5}, "
        "and the cursor has the key 0 (int)" in dead.reason
    )
    assert "Return a cursor with str keys" in dead.reason
    assert '"args":["default",0,null]' in dead.payload  # resumes from the last good cursor


_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5)
_json_like = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 9), inner, max_size=3)
    ),
    max_leaves=8,
)


def _as_json_gives(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return [_as_json_gives(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json_gives(v) for k, v in value.items()}
    return value


@settings(max_examples=150, deadline=None)
@given(_json_like)
def test_an_argument_arrives_as_enqueued_or_is_refused(value: object) -> None:
    """A handler never gets a value other than the one enqueued (tuples arrive as lists)."""
    queue = Queue(MemoryBackend())
    got: list[object] = []

    @queue.job
    async def take(v: object) -> None:
        got.append(v)

    async def go() -> bool:
        try:
            await take.enqueue(value)
        except SerializationError:
            return False
        await Worker(queue, burst=True).run()
        return True

    if asyncio.run(go()):
        assert got == [_as_json_gives(value)]


async def test_a_worker_of_a_queue_without_job_types_refuses_to_run(queue: Queue) -> None:
    await queue.backend.push(
        [Envelope("j1", "default", '{"job":"elsewhere.send","args":[],"kwargs":{}}', 0.0)],
        0.0,
    )
    with pytest.raises(ConfigError) as caught:
        await Worker(queue, burst=True).run()
    message = str(caught.value)
    assert "declares no job types" in message and "on memory (this process only)" in message
    assert "import the modules that declare them" in message
    assert await queue.backend.dead_jobs() == []  # the job was not claimed, so not dead
