"""Poison input hurts only itself: bad delays, handlers raising BaseException, arguments that do
not fit, cron expressions that never tick, apps that do not import (issue 12, section 3)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import batchy
from batchy.__main__ import main
from batchy.jobs import (
    ArgumentError,
    ConfigError,
    Cron,
    DelayError,
    JobDefinitionError,
    JobError,
    MemoryBackend,
    NoRetry,
    Queue,
    Retry,
    parse_queues,
)
from batchy.jobs._model import Message, encode
from batchy.testing import record

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def queue() -> Queue:
    return Queue(MemoryBackend())


def quick(count: int, error: BaseException) -> float:
    return 0.0


# -- delays and times ---------------------------------------------------------------


def test_delay_errors_are_job_errors() -> None:
    assert issubclass(DelayError, JobError) and issubclass(DelayError, ValueError)
    assert issubclass(ArgumentError, JobError) and issubclass(ArgumentError, TypeError)
    assert issubclass(NoRetry, JobError)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (math.nan, "is not finite"),
        (math.inf, "is not finite"),
        (-1, "is negative"),
        ("5", "is a str, not a number"),
        (True, "is a bool, not a number"),
    ],
)
async def test_bad_delays_are_refused_at_enqueue(queue: Queue, value: object, problem: str) -> None:
    @queue.job(name="mail.send")
    async def send(to: str) -> None: ...

    with pytest.raises(DelayError) as info:
        await send.options(delay=value).enqueue("a")  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"job 'mail.send': delay={value!r} {problem}")
    assert "a finite number of seconds >= 0 (an int or float, e.g. delay=60)" in message
    with pytest.raises(DelayError, match=r"job 'mail\.send': delay="):
        await queue.enqueue_many([send.call("b"), send.options(delay=value).call("c")])  # type: ignore[arg-type]
    assert (await queue.info()).queues == ()  # nothing at all was enqueued


@pytest.mark.parametrize("value", [math.nan, math.inf, -5.0, "tomorrow"])
def test_bad_times_are_refused_at_enqueue(queue: Queue, value: object) -> None:
    @queue.job(name="mail.send")
    async def send(to: str) -> None: ...

    with pytest.raises(DelayError) as info:
        send.options(at=value).enqueue_sync("a")  # type: ignore[arg-type]
    assert str(info.value).startswith(f"job 'mail.send': at={value!r} ")
    assert "a Unix time in seconds (e.g. time.time() + 60) or an aware datetime" in str(info.value)


async def test_at_takes_an_aware_datetime_and_refuses_a_naive_one(queue: Queue) -> None:
    @queue.job(name="mail.send")
    async def send(to: str) -> None: ...

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    handle = await send.options(at=later).enqueue("a")
    assert (await handle.status()).state == "scheduled"
    with pytest.raises(DelayError) as info:
        await send.options(at=later.replace(tzinfo=None)).enqueue("b")
    assert "has no time zone" in str(info.value) and "datetime.now(UTC)" in str(info.value)


def test_retry_refuses_a_bad_delay() -> None:
    for value in (math.nan, math.inf, -1.0, "5"):
        with pytest.raises(DelayError) as info:
            Retry(delay=value)  # type: ignore[arg-type]
        assert str(info.value).startswith(f"Retry: delay={value!r} ")
        assert "or leave it out for the job's backoff" in str(info.value)
    assert Retry(delay=0).delay == 0.0


async def test_a_bad_backoff_kills_only_its_job(queue: Queue) -> None:
    class SneakyRetry(Retry):
        pass

    @queue.job(retries=3, backoff=lambda count, error: math.nan)
    async def nan_backoff() -> None:
        raise ValueError("boom")

    @queue.job(retries=3)
    async def sneaky() -> None:
        error = SneakyRetry(delay=1)
        error.delay = math.inf  # set past the check in Retry()
        raise error

    @queue.job
    async def fine() -> str:
        return "ok"

    bad = [await nan_backoff.enqueue(), await sneaky.enqueue()]
    good = await fine.enqueue()
    await fast_worker(queue, burst=True).run()
    assert await good.result() == "ok"
    for handle in bad:
        status = await handle.status()
        assert status.state == "dead", status
    assert "its backoff gave nan, which is not finite" in (await bad[0].status()).reason
    assert "Retry gave delay=inf, which is not finite" in (await bad[1].status()).reason


# -- every exception out of a handler is a failed attempt -----------------------------


class Custom(BaseException):
    pass


POISON = [
    SystemExit(3),
    KeyboardInterrupt(),
    GeneratorExit(),
    asyncio.CancelledError(),
    Custom("custom"),
]


@pytest.mark.parametrize("generator", [False, True], ids=["async", "generator"])
@pytest.mark.parametrize("poison", POISON, ids=lambda e: type(e).__name__)
async def test_base_exceptions_are_failed_attempts(
    queue: Queue, poison: BaseException, generator: bool
) -> None:
    runs = []
    if generator:

        @queue.job(name="bad", retries=2, backoff=quick)
        def bad():  # type: ignore[no-untyped-def]
            runs.append(1)
            raise poison
            yield

    else:

        @queue.job(name="bad", retries=2, backoff=quick)
        async def bad() -> None:
            runs.append(1)
            raise poison

    @queue.job
    async def fine(i: int) -> int:
        await asyncio.sleep(0.01)
        return i

    doomed = await bad.enqueue()
    good = [await fine.enqueue(i) for i in range(5)]
    worker = fast_worker(queue, burst=True)
    await asyncio.wait_for(worker.run(), 10)  # the worker keeps running and drains
    assert [await h.result() for h in good] == list(range(5))
    assert len(runs) == 3  # counted: the first run and 2 retries
    status = await doomed.status()
    assert status.state == "dead"
    assert f"{type(poison).__name__}" in status.reason and "failed 3 time(s)" in status.reason


@pytest.mark.parametrize("generator", [False, True], ids=["async", "generator"])
async def test_a_failing_handler_reaches_the_engines_task_failed_hook_once(
    queue: Queue, generator: bool
) -> None:
    """A job handler that raises is reported to ``Hook.task_failed``, named as itself.

    A generator handler runs as a task of its own, which reports itself. An
    ``async def`` handler is awaited inside its run's task, which did not
    report it, so the hook missed every failure of the usual kind of handler.
    """
    if generator:

        @queue.job(name="bad", retries=0)
        def bad():  # type: ignore[no-untyped-def]
            raise ValueError("bad row")
            yield

    else:

        @queue.job(name="bad", retries=0)
        async def bad() -> None:
            raise ValueError("bad row")

    @queue.job(name="good")
    async def good() -> None:
        pass

    await bad.enqueue()
    await good.enqueue()
    with record() as rec:
        await asyncio.wait_for(fast_worker(queue, burst=True).run(), 10)
    assert [(t.name, repr(e)) for t, e in rec.failures] == [
        ("test_a_failing_handler_reaches_the_engines_task_failed_hook_once.<locals>.bad",
         "ValueError('bad row')"),
    ]  # fmt: skip


async def test_a_handler_that_cancels_its_own_task_has_failed_an_attempt(queue: Queue) -> None:
    """``asyncio.current_task().cancel()`` in a handler is the handler's own raise.

    A run awaits an ``async def`` handler in its own task, so that task is the
    run: taken for the worker's stop, the job was released and run again, for
    ever, never counted and never dead. Only the worker's own stops release.
    """
    runs: list[int] = []

    @queue.job(retries=1, backoff=quick)
    async def selfcancel() -> None:
        runs.append(1)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0.01)

    handle = await selfcancel.enqueue()
    await asyncio.wait_for(fast_worker(queue, burst=True).run(), 10)
    status = await handle.status()
    assert status.state == "dead" and len(runs) == 2
    assert "CancelledError" in (status.reason or "")


@pytest.mark.parametrize("how", ["kill", "cancelled from outside"])
async def test_kill_is_still_a_shutdown_and_stops_the_runs_first(queue: Queue, how: str) -> None:
    """``kill()``, or a cancel of the worker's task as asyncio.run's on Ctrl-C without
    the worker's signal handlers: its runs stop, and their jobs are left to their lease.

    Runs are batchy tasks, which asyncio does not cancel at its end: left pending,
    the garbage collector would close them later, and the runner would take that
    close for a failed attempt. The worker stops them itself as it ends.
    """
    started = asyncio.Event()
    ended: list[str] = []

    @queue.job(retries=0)
    async def hold() -> None:
        started.set()
        try:
            await asyncio.sleep(5)
        finally:
            ended.append("cleaned up")

    handle = await hold.enqueue()
    worker = fast_worker(queue)
    task = asyncio.create_task(worker.run())
    await started.wait()
    if how == "kill":
        worker.kill()
    else:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["cleaned up"] and worker.stats()["running"] == 0
    assert (await handle.status()).state == "running"  # left to its lease, not failed


async def test_a_run_stopped_at_shutdown_finishes_its_cleanup(queue: Queue) -> None:
    """A run cancelled once at shutdown is not cancelled again as the worker ends.

    A second ``CancelledError`` cut short a handler's cleanup (an awaited
    rollback, say), and the worker returned before the cleanup was over.
    """
    log: list[str] = []

    @queue.job
    async def tidy() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # a rollback, say
            log.append("cleanup done")
            raise

    cycle = queue.backend.cycle

    async def slow_turn(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.05)  # the worker's last turn outlasts nothing else
        return await cycle(*args, **kwargs)

    queue.backend.cycle = slow_turn  # type: ignore[method-assign]
    handle = await tidy.enqueue()
    worker = fast_worker(queue, shutdown_timeout=0.1)
    task = asyncio.create_task(worker.run())
    while worker.stats()["running"] == 0:
        await asyncio.sleep(0.01)
    worker.stop()
    await task
    assert log == ["cleanup done"]  # over before run() returned, and not interrupted
    assert (await handle.status()).state == "queued"  # handed back


async def test_stop_still_hands_jobs_back(queue: Queue) -> None:
    started = asyncio.Event()

    @queue.job(retries=0)
    async def hold() -> None:
        started.set()
        await asyncio.sleep(5)

    handle = await hold.enqueue()
    worker = fast_worker(queue, shutdown_timeout=0.05)
    task = asyncio.create_task(worker.run())
    await started.wait()
    worker.stop()
    await task
    assert (await handle.status()).state == "queued"  # handed back, not dead


# -- arguments ------------------------------------------------------------------------


def test_arguments_are_bound_at_enqueue(queue: Queue) -> None:
    @queue.job(name="tag.apply")
    async def f(tag: str) -> None: ...

    with pytest.raises(ArgumentError) as info:
        f.enqueue_sync(1, 2, 3)  # type: ignore[call-arg]
    message = str(info.value)
    assert message.startswith("job 'tag.apply' cannot take args=(1, 2, 3) kwargs={}")
    assert "too many positional arguments" in message
    assert "its handler takes (tag)" in message and "nothing was enqueued" in message
    with pytest.raises(ArgumentError, match="missing a required argument: 'tag'"):
        f.options(delay=1).enqueue_sync()  # type: ignore[call-arg]
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'tga'"):
        queue.enqueue_many_sync([f.call("a"), f.call("a", tga="b")])  # type: ignore[call-arg]
    assert f.enqueue_sync(tag="ok").id


def test_an_enqueue_option_passed_to_the_handler_names_options(queue: Queue) -> None:
    # `await send_welcome.enqueue(42, connection=conn)` said only "unexpected keyword
    # argument 'connection'": nothing pointed at options(connection=...).
    @queue.job(name="mail.welcome")
    async def send_welcome(user_id: int) -> None: ...

    with pytest.raises(ArgumentError) as info:
        send_welcome.enqueue_sync(42, connection=object())  # type: ignore[call-arg]
    message = str(info.value)
    assert "unexpected keyword argument 'connection'; its handler takes (user_id); " in message
    assert message.endswith(
        "; connection=... is an enqueue option, not the handler's: "
        "send_welcome.options(connection=...).enqueue(...); nothing was enqueued"
    )
    with pytest.raises(ArgumentError) as info:
        send_welcome.enqueue_sync(42, delay=5, key="k")  # type: ignore[call-arg]
    assert "; delay=..., key=... are enqueue options, not the handler's: " in str(info.value)
    assert "send_welcome.options(delay=..., key=...).enqueue(...)" in str(info.value)

    # A handler that takes a parameter of an option's name gets it; no hint for others.
    @queue.job(name="mail.later")
    async def later(delay: int) -> None: ...

    with pytest.raises(ArgumentError) as info:
        later.enqueue_sync(delay=1, queue="low")  # type: ignore[call-arg]
    assert "queue=... is an enqueue option" in str(info.value)
    assert "delay=..." not in str(info.value)
    with pytest.raises(ArgumentError) as info:
        later.enqueue_sync(dealy=1)  # type: ignore[call-arg]
    assert "enqueue option" not in str(info.value)


async def test_arguments_are_bound_at_async_enqueue(queue: Queue) -> None:
    @queue.job(name="tag.apply")
    async def f(tag: str) -> None: ...

    with pytest.raises(ArgumentError, match="too many positional arguments"):
        await f.enqueue(1, 2)  # type: ignore[call-arg]
    with pytest.raises(ArgumentError):
        await queue.enqueue_many([f.call()])  # type: ignore[call-arg]
    assert (await queue.info()).queues == ()


async def test_a_payload_that_no_longer_binds_goes_dead_at_once(queue: Queue) -> None:
    runs = []

    @queue.job(name="tag.apply")
    async def f(tag: str) -> None:
        runs.append(tag)

    # Enqueued by older code that passed two arguments.
    old = Message("old", "default", "tag.apply", ["a", "b"], {})
    await queue.backend.push(
        [batchy.jobs.Envelope("old", "default", encode(old, queue.serializer))], time.time()
    )
    await fast_worker(queue, burst=True).run()
    assert runs == []
    status = await queue.handle("old").status()
    assert status.state == "dead"
    assert "no longer fit its handler" in status.reason
    assert "too many positional arguments" in status.reason
    assert "batchy dead retry old" in status.reason


async def test_no_retry_sends_the_job_to_the_dead_set_at_once(queue: Queue) -> None:
    runs = []

    @queue.job(retries=5)
    async def charge(card: str) -> None:
        runs.append(card)
        raise NoRetry("card deleted")

    handle = await charge.enqueue("c1")
    await fast_worker(queue, burst=True).run()
    assert runs == ["c1"]
    status = await handle.status()
    assert status.state == "dead"
    assert status.reason == "NoRetry: card deleted (failed 1 time(s); not retried: NoRetry)"


def test_task_argument_errors_show_pythons_counts() -> None:
    @batchy.task
    async def f(tag: str) -> str:
        return tag

    with pytest.raises(TypeError) as info:
        f(1, 2, 3)  # type: ignore[call-arg]
    assert "takes 1 positional argument but 3 were given" in str(info.value)

    class C:
        @batchy.task
        def m(self, x: int):  # type: ignore[no-untyped-def]
            yield
            return x

    with pytest.raises(TypeError) as info:
        C().m(1, 2)  # type: ignore[call-arg]
    assert "takes 2 positional arguments but 3 were given" in str(info.value)  # as Python says


# -- cron, queue weights --------------------------------------------------------------


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"])
def test_cron_that_never_ticks_is_refused(expr: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        Cron(expr)
    assert str(info.value).startswith(f"cron expression {expr!r} never ticks")
    assert "fix the day or month field" in str(info.value)
    with pytest.raises(JobDefinitionError, match="never ticks"):
        Queue(MemoryBackend()).periodic(expr)


def test_cron_leap_day_is_fine() -> None:
    assert Cron("0 0 29 2 *").next_after(0) > 0
    assert Cron("0 0 30 2 1").next_after(0) > 0  # day or weekday: Mondays tick


@pytest.mark.parametrize("expr", ["*/\u00b2 * * * *", "\u0661 * * * *", "1-\u00b3 * * * *"])
def test_cron_non_ascii_digits_name_the_field(expr: str) -> None:
    with pytest.raises(JobDefinitionError) as info:
        Cron(expr)
    assert "the minute field" in str(info.value) and "is not valid" in str(info.value)


def test_queue_weight_non_ascii_digit() -> None:
    with pytest.raises(ConfigError, match="weight '\u00b2' is not a positive integer"):
        parse_queues(["critical,\u00b2"])


# -- the command line -----------------------------------------------------------------


def run_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str) -> int:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    return int(info.value.code or 0)


@pytest.mark.parametrize(
    ("source", "cause"),
    [
        ("def broken(:\n", "SyntaxError: invalid syntax"),
        ("raise RuntimeError('no config')\n", "RuntimeError: no config"),
        ("import no_such_thing_here\n", "ModuleNotFoundError: No module named"),
    ],
)
def test_worker_app_that_fails_to_import(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    source: str,
    cause: str,
) -> None:
    name = f"poison_app_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    code = run_cli(monkeypatch, tmp_path, "worker", f"{name}:queue", "--burst")
    sys.modules.pop(name, None)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"batchy: error: app '{name}:queue': importing module {name!r} failed")
    assert cause in err and f"{name}.py" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # a missing attribute was "is None", and named none of the module's queues
        (
            "{m}:nope",
            "module '{m}' has no attribute 'nope'; point at the Queue object your jobs are declared on (it holds: {m}:queue)",
        ),
        (
            "{m}:hello",
            "{m}.hello is <batchy.jobs.JobType {m}.hello queue=default>, not a batchy.jobs.Queue; point at the Queue object your jobs are declared on (it holds: {m}:queue)",
        ),
        # a file path was "No module named '{m}/py'"
        (
            "{m}.py:queue",
            "'{m}.py' is a file path; name the module as Python imports it, from the directory that contains it: {m}:queue",
        ),
        (
            "./sub/{m}.py:queue",
            "'./sub/{m}.py' is a file path; name the module as Python imports it, from the directory that contains it: sub.{m}:queue",
        ),
    ],
)
def test_worker_app_spec_mistakes(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spec: str,
    expected: str,
) -> None:
    m = "poison_spec_app"
    (tmp_path / f"{m}.py").write_text(
        "from batchy.jobs import MemoryBackend, Queue\n"
        "queue = Queue(MemoryBackend())\n"
        "@queue.job\nasync def hello() -> None: ...\n"
    )
    spec = spec.format(m=m)
    try:
        code = run_cli(monkeypatch, tmp_path, "worker", spec, "--burst")
    finally:
        sys.modules.pop(m, None)
    assert code == 2
    assert capsys.readouterr().err == f"batchy: error: app {spec!r}: {expected.format(m=m)}\n"


def test_worker_without_an_app(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BATCHY_APP", raising=False)
    assert run_cli(monkeypatch, tmp_path, "worker", "--burst") == 2
    assert capsys.readouterr().err == (  # it was "app None is not 'module:attribute' ..."
        "batchy: error: no app given: name the batchy.jobs.Queue as 'module:attribute', "
        "e.g. `batchy worker myapp.jobs:queue`, or set BATCHY_APP=myapp.jobs:queue\n"
    )


def test_worker_refuses_a_queue_that_declares_no_jobs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The jobs live in another module that the queue's module does not import: a worker
    # over it knew no job type and sent every job it claimed to the dead set.
    (tmp_path / "poison_bare_queue.py").write_text(
        "from batchy.jobs import Queue\nqueue = Queue('jobs.db')\n"
    )
    # The web app, which imports the jobs' module, enqueued one.
    sender = Queue(str(tmp_path / "jobs.db"))

    @sender.job(name="poison_bare_tasks.hello")
    async def hello() -> None: ...

    hello.enqueue_sync()
    try:
        code = run_cli(monkeypatch, tmp_path, "worker", "poison_bare_queue:queue", "--burst")
        err = capsys.readouterr().err
        assert code == 2
        assert err == (
            "batchy: error: app 'poison_bare_queue:queue': the queue on SQLite "
            f"{tmp_path / 'jobs.db'} declares no job types, so this worker could run none "
            "(each job it claimed would go to the dead set as unknown); import the modules "
            "that declare them (@queue.job) before it runs\n"
        )

        async def look() -> tuple[int, list[int]]:
            try:
                info = await sender.info()
            finally:
                await sender.close()
            return info.dead, [q.size for q in info.queues]

        assert asyncio.run(look()) == (0, [1])  # the job waits for a worker that knows it
    finally:
        sys.modules.pop("poison_bare_queue", None)


def test_cli_enqueue_checks_arguments_and_delay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "poison_cli_app.py").write_text(
        "from batchy.jobs import Queue\n"
        f"queue = Queue({str(tmp_path / 'jobs.db')!r})\n"
        "@queue.job(name='tagger')\n"
        "async def tagger(tag): ...\n"
    )
    code = run_cli(monkeypatch, tmp_path, "enqueue", "poison_cli_app:queue", "tagger", "1", "2")
    assert code == 2
    assert "job 'tagger' cannot take args=(1, 2)" in capsys.readouterr().err
    code = run_cli(
        monkeypatch, tmp_path, "enqueue", "poison_cli_app:queue", "tagger", "1", "--delay", "nan"
    )
    assert code == 2
    assert "job 'tagger': delay=nan is not finite" in capsys.readouterr().err
    sys.modules.pop("poison_cli_app", None)


# -- the runner never lets a bad outcome out ----------------------------------------


async def test_runner_turns_a_backoff_that_raises_into_a_dead_job(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(count: int, error: BaseException) -> float:
        raise ZeroDivisionError("oops")

    @queue.job(retries=3, backoff=broken)
    async def f() -> None:
        raise ValueError("first")

    handle = await f.enqueue()
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True).run()
    status = await handle.status()
    assert status.state == "dead"
    assert "its backoff raised ZeroDivisionError: oops" in status.reason
    assert "crashed the runner" not in caplog.text


# -- declarations and the store's last look -------------------------------------------


def test_keep_result_must_be_finite(queue: Queue) -> None:
    # (Past ten years a store's time to live overflows: Redis failed the round trip.)
    for value in (math.inf, math.nan, -1, 10**15, 10 * 365 * 86400 + 1):
        with pytest.raises(JobDefinitionError) as info:

            @queue.job(name="kept", keep_result=value)
            async def kept() -> None: ...

        assert str(info.value) == (
            f"job 'test_keep_result_must_be_finite.<locals>.kept': keep_result={value!r} must "
            "be a finite number of seconds >= 0 and at most ten years, 315,360,000 (0: results "
            "are not kept)"
        )


def test_a_periodic_handler_must_take_no_arguments(queue: Queue) -> None:
    with pytest.raises(JobDefinitionError) as info:

        @queue.periodic(60, name="report")
        async def report(day: str) -> None: ...

    assert str(info.value) == (
        "periodic job 'report': a tick calls its handler with no arguments, but it takes "
        "(day) (missing a required argument: 'day'); give its parameters defaults"
    )

    @queue.periodic(60, name="report2")
    async def report2(day: str = "today") -> None: ...


def test_screen_turns_unkeepable_outcomes_into_their_jobs_death(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from batchy.jobs import Backend, Outcome

    odd = Outcome("a", "explode", queue="q")  # type: ignore[arg-type]
    no_payload = Outcome("b", "retry", queue="q", payload=None, due=1.0)
    kept = Outcome("c", "done", queue="q", result='"r"', keep=math.nan)
    fine = Outcome("d", "retry", queue="q", payload="{}", due=1.0)
    with caplog.at_level(logging.WARNING, "batchy.jobs"):
        a, b, c, d = Backend.screen_outcomes([odd, no_payload, kept, fine])
    assert (a.kind, b.kind, c.kind) == ("dead", "dead", "done") and d is fine
    assert "its outcome kind 'explode' is none of done, retry, dead, release" in a.reason
    assert "its retry outcome had payload=None, not a string" in b.reason
    assert a.reason.endswith("`batchy dead retry a` runs it again)")
    assert (c.keep, c.result) == (0.0, None)
    assert "job c: keep=nan is not a finite number of seconds >= 0" in caplog.text


def test_envelopes_with_a_bad_unique_ttl_are_refused() -> None:
    from batchy.jobs import Backend, Envelope

    with pytest.raises(DelayError) as info:
        Backend.check_envelopes([Envelope("e1", "q", "{}", unique="u", unique_ttl=math.inf)])
    assert str(info.value) == (
        "job e1: unique_ttl=inf is not finite; an envelope's due is a Unix time (None: now) "
        "and its unique_ttl seconds >= 0; nothing was enqueued"
    )


async def test_an_exception_whose_str_raises_is_still_a_failed_attempt(queue: Queue) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    @queue.job(retries=0)
    async def weird() -> None:
        raise Unprintable()

    handle = await weird.enqueue()
    await fast_worker(queue, burst=True).run()
    status = await handle.status()
    assert status.state == "dead"
    assert status.reason.startswith("Unprintable: <str() raised RuntimeError> (failed 1 time(s)")


@pytest.mark.parametrize("bad", [123, b"x", ""])
def test_a_job_id_must_be_a_non_empty_str(queue: Queue, bad: object) -> None:
    # An int id failed deep in the store with "'int' object has no attribute 'isascii'".
    @queue.job(name="ship")
    async def ship(order: int) -> None:
        return None

    with pytest.raises(JobDefinitionError) as info:
        ship.options(id=bad)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"job 'ship': id={bad!r} must be a non-empty str (a job's id in the store, e.g. "
        "id=f'invoice-{n}'); nothing was enqueued"
    )
