"""The ``batchy`` commands an operator runs: info, jobs list|show|delete|run-now|cancel, dead.

In this process on a SQLite app for what they print, and with a real worker process on
SQLite, Redis and PostgreSQL for what needs one (live busy counts, cancelling a run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchy.__main__ import _parser, main
from batchy.jobs import Queue

from .test_processes import App, enqueue

# The worker-process fixture (SQLite, Redis, PostgreSQL), under a name of its own here.
from .test_processes import app as app_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(90)

APP = """
import asyncio
from batchy.jobs import Queue

queue = Queue({db!r})

@queue.job(name="flaky", backoff=lambda n, e: 60.0)
async def flaky(x: int) -> None:
    raise ValueError(f"boom {{x}}")

@queue.job(name="bad", retries=0)
async def bad(x: int) -> None:
    raise KeyError(x)

@queue.job(name="ok")
async def ok(x: int) -> int:
    return x * 2

@queue.sharded(shards=2, name="walk")
async def walk(shard: int, shards: int, cursor: object) -> None:
    return None
"""


class Cli:
    """Runs ``batchy`` in this process on an app module of its own (``spec``)."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.db = tmp_path / "jobs.db"
        name = f"cliapp_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP.format(db=str(self.db))))
        self.spec = f"{name}:queue"
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        """``batchy`` with ``args``, the app spec put after the command's words."""
        words = 2 if args[0] in ("jobs", "dead") else 1
        return self.bare(*args[:words], self.spec, *args[words:])

    def bare(self, *args: str) -> tuple[int, str, str]:
        """``batchy`` with ``args`` as they are."""
        self.capsys.readouterr()
        try:
            with pytest.raises(SystemExit) as done:
                main(list(args))
        finally:
            # Each command closes the app's store, as the process it runs in would end.
            sys.modules.pop(self.spec.split(":")[0], None)
        out, err = self.capsys.readouterr()
        code = done.value.code
        return (code if isinstance(code, int) else 1), out, err


@pytest.fixture
def cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    monkeypatch.chdir(tmp_path)
    yield Cli(tmp_path, capsys)


def ids_of(out: str) -> list[str]:
    """The job ids of a listing (the first word of each job line)."""
    return [line.split()[0] for line in out.splitlines() if len(line.split()[0]) == 32]


def test_every_option_of_every_command_has_help() -> None:
    missing = []

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub)
                    if not any(c.dest == name for c in action._choices_actions):
                        missing.append(f"command {name}")
            elif action.dest != "help" and not action.help:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")

    walk(_parser())
    assert missing == []


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # `batchy worker --log-level verbose` was a traceback from logging.basicConfig
    # ("ValueError: Unknown level: 'VERBOSE'", exit 1).
    with pytest.raises(SystemExit) as done:
        main(["worker", "app:queue", "--log-level", "verbose"])
    assert done.value.code == 2
    assert "argument --log-level: invalid choice: 'VERBOSE' (choose from 'DEBUG', " in (
        capsys.readouterr().err
    )
    assert _parser().parse_args(["worker", "--log-level", "debug"]).log_level == "DEBUG"


def test_every_command_says_which_store(cli: Cli) -> None:
    where = f"store: SQLite {cli.db}"
    for command in (("info",), ("jobs", "list"), ("dead", "list")):
        code, out, _ = cli(*command)
        assert code == 0 and out.splitlines()[0] == where, (command, out)
    code, out, err = cli("enqueue", "ok", "1")
    assert code == 0 and len(out.strip()) == 32  # stdout: the id alone, for scripts
    assert err.strip() == where


def test_empty_lists_say_so(cli: Cli) -> None:
    for state in ("queued", "scheduled", "retrying", "running", "blocked", "dead", "done"):
        code, out, _ = cli("jobs", "list", "--state", state)
        assert (code, out.splitlines()[1:]) == (0, [f"no {state} jobs"])
    code, out, _ = cli("jobs", "list", "--queue", "mail", "--job", "ok")
    assert out.splitlines()[1] == "no queued jobs in queue 'mail' of job type 'ok'"
    assert cli("dead", "list")[1].splitlines()[1] == "no dead jobs"


def test_jobs_list_pages_show_delete_and_run_now(cli: Cli) -> None:
    made = [cli("enqueue", "ok", str(i))[1].strip() for i in range(5)]
    later = cli("enqueue", "ok", "9", "--delay", "300")[1].strip()
    code, out, _ = cli("jobs", "list", "--limit", "2")
    assert code == 0 and ids_of(out) == made[:2]
    assert out.splitlines()[1] == "queued jobs:"
    seen = ids_of(out)
    while "next page:" in out:
        cursor = out.split("--after ")[1].split()[0]
        out = cli("jobs", "list", "--limit", "2", "--after", cursor)[1]
        seen += ids_of(out)
    assert seen == made
    code, out, _ = cli("jobs", "show", made[0])
    assert code == 0
    fields = dict(line.split(":", 1) for line in out.splitlines()[1:] if ":" in line)
    assert fields["state"].strip() == "queued" and fields["job"].strip() == "ok"
    assert fields["args"].strip() == "[0]"
    assert cli("jobs", "delete", made[0], made[1]) == (
        0,
        f"store: SQLite {cli.db}\ndeleted 2 job(s)\n",
        "",
    )
    code, out, _ = cli("jobs", "list", "--state", "scheduled")
    assert ids_of(out) == [later] and re.search(r"  in (29\d\.\d|300\.0)s$", out.splitlines()[2])
    assert cli("jobs", "run-now", later)[1].endswith("1 job(s) due now\n")
    assert cli("jobs", "list", "--state", "scheduled")[1].splitlines()[1] == "no scheduled jobs"


def test_errors_exit_2_and_say_what_to_do(cli: Cli) -> None:
    queued = cli("enqueue", "ok", "1")[1].strip()
    code, _, err = cli("jobs", "show", "nosuchid")
    assert code == 2
    assert err == (
        f"batchy: error: job nosuchid is not in SQLite {cli.db}: it was never enqueued there, "
        "or it finished and its result was not kept (or has expired); check the id, and the "
        "store the app points at\n"
    )
    code, _, err = cli("jobs", "delete", queued, "nosuchid")
    assert code == 2 and "job nosuchid is not in" in err and "nothing was deleted" in err
    assert ids_of(cli("jobs", "list")[1]) == [queued]  # all or nothing
    code, _, err = cli("jobs", "cancel", queued)
    assert code == 2 and f"job {queued} is queued: it is not running; delete it instead" in err
    code, _, err = cli("jobs", "run-now", queued)
    assert code == 2 and "it already waits only for a free worker" in err
    code, _, err = cli("jobs", "delete")
    assert code == 2 and "`batchy jobs delete` needs job ids" in err
    code, _, err = cli("jobs", "show")
    assert code == 2 and "`batchy jobs show` takes one job id, got 0" in err
    code, _, err = cli("dead", "retry", "nosuchid")
    assert code == 2
    assert f"batchy: error: job nosuchid is not in SQLite {cli.db}, so nothing was retried" in err
    code, _, err = cli("dead", "retry")
    assert code == 2 and "needs job ids, or --all, or --queue/--job" in err
    code, _, err = cli("dead", "show", queued)
    assert code == 2 and f"job {queued} is queued, not dead" in err
    code, _, err = cli("jobs", "list", "--after", "bogus")
    assert code == 2 and "page cursor 'bogus' was not made by" in err


def test_an_id_or_filter_no_job_can_have_exits_2_naming_it(cli: Cli) -> None:
    # A shell passes bytes: ones that are no UTF-8 reach Python as lone surrogates,
    # which every store but memory failed to encode (a UnicodeEncodeError traceback).
    bad = os.fsdecode(b"job-\xff")
    said = "holds a lone surrogate ('\\udcff' at position 4)"
    for args, where in (
        (("jobs", "show", bad), "admin.job('job-\\udcff'): the job id"),
        (("jobs", "delete", bad), "admin.delete('job-\\udcff'): the job id"),
        (("jobs", "cancel", "ok", bad), "admin.cancel('job-\\udcff'): the job id"),
        (("dead", "show", bad), "admin.job('job-\\udcff'): the job id"),
        (("dead", "retry", bad), "admin.retry_dead('job-\\udcff'): the job id"),
        (("dead", "delete", bad), "admin.delete_dead('job-\\udcff'): the job id"),
        (("jobs", "list", "--queue", bad), "admin.jobs('queued', queue='job-\\udcff')"),
        (("jobs", "list", "--state", "blocked", "--key", bad), "admin.jobs('blocked', key="),
        (("dead", "retry", "--queue", bad), "admin.jobs('dead', queue='job-\\udcff')"),
    ):
        code, out, err = cli(*args)
        assert code == 2 and err.startswith(f"batchy: error: {where}"), (args, err)
        assert said in err and "enqueue refuses such text on every store" in err, err
    code, out, _ = cli("dead", "retry", "--job", bad)  # a job type: no job is of it
    assert code == 0 and "retried 0 dead job(s)" in out


@pytest.mark.parametrize("kwargs", ["[1]", "1", '"x"', "null"])
def test_enqueue_kwargs_that_are_not_a_json_object_are_refused(cli: Cli, kwargs: str) -> None:
    # They were a 20-line traceback: "argument after ** must be a mapping, not list".
    code, out, err = cli("enqueue", "ok", "--kwargs", kwargs)
    assert (code, out) == (2, "")
    assert err == (
        f"batchy: error: job 'ok': --kwargs {kwargs!r} is not a JSON object; pass the keyword "
        """arguments by name, e.g. --kwargs '{"user_id": 42}'\n"""
    )
    assert cli("jobs", "list")[1].splitlines()[1] == "no queued jobs"


def test_retrying_and_dead_jobs_show_their_error_and_traceback(cli: Cli) -> None:
    flaky = cli("enqueue", "flaky", "1")[1].strip()
    bad = cli("enqueue", "bad", "2")[1].strip()
    code = (
        "import asyncio, sys\nsys.path.insert(0, '.')\nimport {m}\nfrom batchy.jobs import Worker\n"
        "asyncio.run(Worker({m}.queue, burst=True, poll_interval=0.02).run())\n"
    ).format(m=cli.spec.split(":")[0])
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    out = cli("jobs", "list", "--state", "retrying")[1]
    assert ids_of(out) == [flaky] and "ValueError: boom 1" in out
    out = cli("jobs", "show", flaky)[1]
    assert "attempts:   1 failed" in out and "next run:" in out
    assert 'raise ValueError(f"boom {x}")' in out.split("traceback:")[1]
    out = cli("dead", "list")[1]
    assert ids_of(out) == [bad] and "KeyError: 2 (failed 1 time(s); retries=0 exhausted)" in out
    out = cli("dead", "show", bad)[1]
    assert "state:      dead" in out and "raise KeyError(x)" in out.split("traceback:")[1]
    assert cli("dead", "retry", "--job", "bad")[1].endswith("retried 1 dead job(s)\n")
    assert ids_of(cli("jobs", "list")[1]) == [bad]


def test_a_running_job_is_live_in_info_and_cancelled_from_the_cli(
    app_fixture: App,  # noqa: F811
) -> None:
    app = app_fixture
    # Heartbeats every 1000 s: a busy count, or a cancel, can only come from the store now.
    worker = app.worker("--concurrency", "20", "--lease", "2000", "--heartbeat", "1000")
    made = [enqueue(app, "slow", f'"s{i}"', "60") for i in range(4)]
    app.wait_for("start", 4)
    info = app.cli("info", "app_jobs:queue")
    assert info.returncode == 0 and "busy=4/20" in info.stdout, info.stdout
    running = app.cli("jobs", "list", "app_jobs:queue", "--state", "running").stdout
    assert sorted(ids_of(running)) == sorted(made)
    done = app.cli("jobs", "cancel", "app_jobs:queue", made[0])
    assert done.returncode == 0, done.stderr
    assert "cancel 1 job(s)" in done.stdout
    deadline = time.monotonic() + 20
    shown = ""
    while "state:      cancelled" not in shown and time.monotonic() < deadline:
        shown = app.cli("dead", "show", "app_jobs:queue", made[0]).stdout
    assert "state:      cancelled" in shown, shown
    assert "error:      cancelled by an operator" in shown and "CancelledError" in shown
    assert (
        "no retrying jobs"
        in app.cli("jobs", "list", "app_jobs:queue", "--state", "retrying").stdout
    )
    assert f"job {made[0]} slow attempt 1 cancelled by an operator" in app.output(worker)
    assert "busy=3/20" in app.cli("info", "app_jobs:queue").stdout


def test_info_lists_each_sharded_jobs_latest_runs(cli: Cli) -> None:
    code, out, _ = cli("info")
    assert code == 0 and "sharded job walk (2 shards): no runs" in out.splitlines()
    queue = Queue(str(cli.db))

    @queue.sharded(shards=2, name="walk")
    async def walk(shard: int, shards: int, cursor: object) -> None:
        return None

    async def start() -> None:
        for run in ("may", "june"):
            assert await walk.start(run) == 2
        await queue.backend.close()

    asyncio.run(start())
    code, out, _ = cli("info", "--runs", "1")
    lines = out.splitlines()
    at = lines.index("sharded job walk (2 shards):")
    assert re.fullmatch(
        r"  run june  started \S+ \S+ \(\d+\.\ds ago\)  0/2 shards done", lines[at + 1]
    )
    assert lines[at + 2 :] == []  # --runs 1: may is not shown


@pytest.mark.parametrize(
    ("store", "address", "said"),
    [
        (
            "from batchy_contrib.jobs.postgres import PostgresBackend as Store",
            "postgresql://postgres:secret@127.0.0.1:1/test",
            "cannot reach PostgreSQL postgresql://postgres:***@127.0.0.1:1/test schema 'batchy': "
            'OperationalError: connection failed: connection to server at "127.0.0.1", port 1 '
            "failed: Connection refused",
        ),
        (
            "from batchy_contrib.jobs.redis import RedisBackend as Store",
            "redis://127.0.0.1:1/9",
            "cannot reach Redis redis://127.0.0.1:1/9 prefix 'batchy:': ConnectionError: ",
        ),
    ],
)
@pytest.mark.parametrize("command", [["info"], ["dead", "list"], ["enqueue", "ok", "1"]])
def test_a_store_the_tools_cannot_reach_is_one_line_not_a_traceback(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: str,
    address: str,
    said: str,
    command: list[str],
) -> None:
    # A server that is down, or a DSN with a typo, printed a 40-line traceback
    # (exit 1) where every other mistake gets one "batchy: error:" line (exit 2).
    monkeypatch.chdir(tmp_path)
    name = f"unreachable_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        f"{store}\nfrom batchy.jobs import Queue\nqueue = Queue(Store({address!r}))\n"
        "@queue.job(name='ok')\nasync def ok(x: int) -> int:\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    words = 2 if command[0] == "dead" else 1
    with pytest.raises(SystemExit) as done:
        main([*command[:words], f"{name}:queue", *command[words:]])
    sys.modules.pop(name, None)
    _, err = capsys.readouterr()
    assert done.value.code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("batchy: error:")]
    assert line.startswith(f"batchy: error: {said}"), line
    # The PostgreSQL store's own error names the store and the fix: the tool says it as is.
    assert line.endswith(
        "Check that the server is up and that the DSN points at it (host, port, database, "
        "user and password)"
        if "PostgreSQL" in said
        else "; check that the server is up and that the app's address (DSN or URL) points at it"
    ), line
    assert line.count("cannot reach") == 1, line
    assert "Traceback" not in err and "secret" not in err


def dead_then_live_again(db: Path, dead: list[str]) -> None:
    """Jobs ``dead`` of type ``bad`` (arg 1) die; the first id is then enqueued again (arg 2)."""
    from batchy.jobs import SQLiteBackend, Worker

    queue = Queue(SQLiteBackend(db))

    @queue.job(name="bad", retries=0)
    async def bad(x: int) -> None:
        raise KeyError(x)

    async def scenario() -> None:
        for job_id in dead:
            await bad.options(id=job_id).enqueue(1)
        await Worker(queue, burst=True, poll_interval=0.01).run()
        await bad.options(id=dead[0]).enqueue(2)  # the same id, live again
        await queue.close()

    asyncio.run(scenario())


def test_dead_show_finds_the_dead_entry_of_an_id_enqueued_again(cli: Cli) -> None:
    # `batchy dead show ID` said "job ID is queued, not dead" while the dead set
    # kept the entry (and its traceback) of the same id: no command showed it.
    dead_then_live_again(cli.db, dead=["bad-1"])
    code, out, err = cli("dead", "show", "bad-1")
    assert code == 0
    assert err == (
        "job bad-1 was enqueued again and is queued (`batchy jobs show bad-1`); its dead entry:\n"
    )
    assert "state:      dead" in out and "KeyError: 1" in out


def test_a_store_the_app_cannot_open_is_its_error_not_the_apps_code(cli: Cli) -> None:
    # The store's error (naming the file and the fix) came wrapped as a failure
    # "at batchy/jobs/_sqlite_tx.py:91; fix that code", pointing at batchy's code.
    cli.db.write_text("a text file of another program\n")
    code, _, err = cli("info")
    assert code == 2
    assert f"importing module {cli.spec.split(':')[0]!r} failed: SQLite job store" in err
    assert "is not a SQLite database" in err
    assert "fix that code" not in err and "_sqlite_tx.py" not in err


class _Stdout:
    """Standard output that fails with ``error`` once ``lines`` lines are written
    (a pipe whose reader stopped, as ``| head`` does, or a full disk)."""

    def __init__(self, error: OSError, lines: int) -> None:
        self.error, self.lines, self.written = error, lines, ""

    def write(self, text: str) -> int:
        if self.written.count("\n") >= self.lines:
            raise self.error
        self.written += text
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize(
    "command",
    [("info",), ("jobs", "list"), ("jobs", "show", "ID"), ("dead", "list"), ("enqueue", "ok", "1")],
)
def test_output_whose_reader_went_away_ends_the_command_quietly(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    # `batchy jobs list app:queue | head`: the write to the closed pipe raised
    # BrokenPipeError, an OSError, which SQLite and Redis took for their own
    # connection failing ("cannot reach SQLite ...; check that the server is up",
    # exit 2) and PostgreSQL printed as a traceback.
    made = cli("enqueue", "ok", "1")[1].strip()
    command = tuple(made if word == "ID" else word for word in command)
    monkeypatch.setattr(sys, "stdout", _Stdout(BrokenPipeError(32, "Broken pipe"), 0))
    code, _, err = cli(*command)
    said = f"store: SQLite {cli.db}\n" if command[0] == "enqueue" else ""  # its stderr
    assert (code, err) == (141, said)


def test_output_that_cannot_be_written_is_said_in_one_line(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `batchy jobs list app:queue > /dev/full` said "cannot reach SQLite ...".
    cli("enqueue", "ok", "1")
    stdout = _Stdout(OSError(28, "No space left on device"), 1)
    monkeypatch.setattr(sys, "stdout", stdout)
    code, _, err = cli("jobs", "list")
    assert stdout.written == f"store: SQLite {cli.db}\n"
    assert (code, err) == (
        1,
        "batchy: error: cannot write to standard output: [Errno 28] No space left on device\n",
    )


def test_a_listing_piped_to_head_exits_141_without_a_word(cli: Cli, tmp_path: Path) -> None:
    # In a real process the last buffered write fails only at the final flush, or as
    # the interpreter exits ("Exception ignored ... BrokenPipeError").
    module = cli.spec.split(":")[0]
    fill = (
        f"import asyncio\nimport {module} as app\n"
        "async def fill():\n"
        "    await asyncio.gather(*(app.ok.enqueue(i) for i in range(1000)))\n"
        "    await app.queue.close()\n"
        "asyncio.run(fill())\n"
    )
    subprocess.run([sys.executable, "-c", fill], cwd=tmp_path, check=True, timeout=60)
    listing = subprocess.Popen(
        [sys.executable, "-m", "batchy", "jobs", "list", cli.spec, "--limit", "1000"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert listing.stdout is not None and listing.stderr is not None
    assert listing.stdout.readline().startswith("store: SQLite")
    listing.stdout.close()
    assert listing.wait(timeout=30) == 141
    assert listing.stderr.read() == ""


def test_ctrl_c_stops_a_command_with_130_and_no_traceback(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C on `batchy jobs list` against a store that does not answer printed
    # asyncio's KeyboardInterrupt traceback.
    import signal

    from batchy.jobs import cli as commands

    async def hangs(queue: Queue, args: argparse.Namespace) -> int:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(60)
        return 0

    monkeypatch.setitem(commands.COMMANDS, "info", hangs)
    assert cli("info") == (130, "", "")


def test_a_store_that_never_answers_is_one_line_not_a_hang(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Redis address that accepts connections and never answers hung `batchy info`
    # for good: the client has no read timeout.
    import batchy.__main__ as entry
    from batchy.jobs import cli as commands

    async def hangs(queue: Queue, args: argparse.Namespace) -> int:
        await asyncio.sleep(60)
        return 0

    monkeypatch.setattr(entry, "ANSWER_WITHIN", 0.2)
    monkeypatch.setitem(commands.COMMANDS, "info", hangs)
    code, out, err = cli("info")
    assert (code, out) == (2, "")
    assert err == (
        f"batchy: error: SQLite {cli.db} did not answer within 0.2 s; check that the server "
        "is up and answering, and that the app's address (DSN or URL) points at it\n"
    )


@pytest.mark.parametrize(
    ("queues", "said"),
    [
        (
            ["-q", "a", "-q", "a"],
            "queue 'a' is given more than once (a, a); name each queue once, "
            "e.g. -q critical -q default",
        ),
        (
            ["-q", "a,2", "-q", "a"],
            "queue 'a' is given more than once (a,2, a); name each queue once, "
            "e.g. -q critical -q default",
        ),
    ],
)
def test_worker_queues_named_twice_are_refused(cli: Cli, queues: list[str], said: str) -> None:
    # `-q a -q a` started a worker on "queues a, a".
    code, out, err = cli("worker", *queues, "--burst")
    assert (code, out, err) == (2, "", f"batchy: error: {said}\n")


@pytest.mark.parametrize("lease", ["inf", "nan", "0", "-1", "soon"])
def test_worker_lease_that_is_not_finite_and_positive_is_named(cli: Cli, lease: str) -> None:
    # `--lease inf` said "heartbeat=None must be > 0 and shorter than lease=inf",
    # naming a heartbeat nobody gave.
    code, out, err = cli("worker", "--lease", lease, "--burst")
    assert (code, out) == (2, "")
    assert err.endswith(
        f"batchy worker: error: argument --lease: {lease!r} is not a finite number of "
        "seconds > 0; e.g. --lease 30\n"
    )


@pytest.mark.parametrize("lease", [float("inf"), float("nan"), 0, -1.0])
def test_worker_lease_is_checked_before_the_heartbeat(cli: Cli, lease: float) -> None:
    from batchy.jobs import ConfigError, Worker

    with pytest.raises(ConfigError) as info:
        Worker(Queue(str(cli.db)), lease=lease)
    assert str(info.value) == (
        f"Worker lease={lease!r} must be a finite number of seconds > 0 (how long a claimed "
        "job stays this worker's without a heartbeat); e.g. lease=30"
    )


def test_every_command_takes_the_app_from_batchy_app(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `BATCHY_APP=m:queue batchy enqueue ok 1` loaded 'ok' as the app (its app was
    # required), and `batchy jobs delete ID1 ID2` loaded ID1.
    monkeypatch.setenv("BATCHY_APP", cli.spec)
    where = f"store: SQLite {cli.db}"
    made = []
    for n in range(3):
        code, out, err = cli.bare("enqueue", "ok", str(n))
        assert (code, err) == (0, where + "\n")
        made.append(out.strip())
    code, out, _ = cli.bare("jobs", "list")
    assert (code, ids_of(out)) == (0, made)
    assert cli.bare("jobs", "show", made[0])[1].splitlines()[1] == f"id:         {made[0]}"
    assert cli.bare("jobs", "delete", made[0], made[1]) == (0, f"{where}\ndeleted 2 job(s)\n", "")
    assert cli.bare("dead", "list")[1] == f"{where}\nno dead jobs\n"
    assert cli.bare("info")[0] == 0
    # An app named on the line wins over BATCHY_APP, as a word or as --app.
    monkeypatch.setenv("BATCHY_APP", "nosuchmodule:queue")
    assert ids_of(cli.bare("jobs", "list", cli.spec)[1]) == [made[2]]
    assert ids_of(cli.bare("jobs", "list", "--app", cli.spec)[1]) == [made[2]]
    assert cli.bare("jobs", "delete", "--app", cli.spec, made[2])[1].endswith("deleted 1 job(s)\n")
    code, out, _ = cli.bare("enqueue", "--app", cli.spec, "ok", "5")
    assert code == 0 and len(out.strip()) == 32


def test_a_command_without_an_app_says_how_to_name_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATCHY_APP", raising=False)
    code, out, err = cli.bare("jobs", "delete", "3f2a", "9c1b")
    assert (code, out) == (2, "")
    assert err == (
        "batchy: error: `batchy jobs` has no app: name the batchy.jobs.Queue as "
        "'module:attribute' first (`batchy jobs delete myapp.jobs:queue ID...`), or with "
        "--app, or set BATCHY_APP=myapp.jobs:queue; '3f2a' is not one (an id or a job name)\n"
    )
    code, _, err = cli.bare("enqueue", "ok", "1")
    assert code == 2 and "`batchy enqueue` has no app: " in err
    # A mistyped app (no ':') before a listing is read as an id, and said so.
    code, _, err = cli.bare("jobs", "list", cli.spec.split(":")[0], "--app", cli.spec)
    assert code == 2
    assert err == (
        f"batchy: error: `batchy jobs list` takes no job ids, got {cli.spec.split(':')[0]!r}; "
        "narrow it with --queue or --job, and name the app as module:attribute (e.g. "
        "myapp.jobs:queue), with --app, or in BATCHY_APP\n"
    )
    code, _, err = cli.bare("info", cli.spec, "--app", "other:queue")
    assert code == 2 and f"two apps, {cli.spec!r} and --app 'other:queue'; give one" in err


def test_an_id_of_the_apps_form_is_taken_for_the_app_and_said_so(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCHY_APP", cli.spec)
    code, _, err = cli.bare("jobs", "delete", "user:abc")
    assert code == 2
    assert err.startswith("batchy: error: app 'user:abc': cannot import module 'user'")
    assert err.endswith(
        "('user:abc' was taken for the app, being module:attribute; if it is an id, name the "
        "app with --app and it is read as one)\n"
    )
    made = cli("enqueue", "ok", "1")[1].strip()
    code, _, err = cli.bare("jobs", "delete", "--app", cli.spec, "user:abc", made)
    assert code == 2 and "job user:abc is not in" in err  # read as an id


def test_enqueue_requires_only_the_job(cli: Cli) -> None:
    # `batchy enqueue capp:queue` said "the following arguments are required: job, args",
    # though a job may take no arguments.
    code, out, err = cli("enqueue")
    assert (code, out) == (2, "")
    assert err == (
        f"batchy: error: `batchy enqueue` has the app {cli.spec!r} but no job: name the job "
        "type, then its arguments as JSON (`batchy enqueue myapp.jobs:queue "
        "myapp.jobs.send_welcome 42`)\n"
    )
    code, _, err = cli.bare("enqueue")
    assert code == 2 and err.endswith(
        "batchy enqueue: error: the following arguments are required: [APP] JOB\n"
    )


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["1", "notjson"], "argument 2, 'notjson', is not JSON (Expecting value: line 1 "
         "column 1 (char 0)); quote a string as JSON, e.g. '\"notjson\"'"),
        (["--kwargs", "{x: 1}"], "--kwargs, '{x: 1}', is not JSON (Expecting property name "
         "enclosed in double quotes: line 1 column 2 (char 1)); quote a string as JSON, "
         "e.g. '\"{x: 1}\"'"),
    ],
)  # fmt: skip
def test_enqueue_says_which_argument_is_not_json(cli: Cli, words: list[str], said: str) -> None:
    # It said "argument is not JSON", not which of them.
    code, out, err = cli("enqueue", "ok", *words)
    assert (code, out, err) == (2, "", f"batchy: error: job 'ok': {said}\n")


CLOSING_APP = """
from batchy.jobs import Queue, SQLiteBackend

class Store(SQLiteBackend):
    async def close(self) -> None:
        await super().close()
        with open({marks!r}, "a") as marks:
            marks.write("closed\\n")

queue = Queue(Store({db!r}))

@queue.job(name="ok")
async def ok(x: int) -> int:
    return x
"""


@pytest.mark.parametrize(
    "words",
    [
        ["enqueue", "nosuchjob", "1"],
        ["enqueue", "ok", "notjson"],
        ["enqueue", "ok", "--kwargs", "[1]"],
        ["enqueue", "ok", "1", "2"],
        ["enqueue", "ok", "1"],
        ["worker", "-q", "a", "-q", "a"],
        ["worker", "--heartbeat", "100"],
        ["jobs", "show", "nosuchid"],
        ["jobs", "list", "extra"],
    ],
)
def test_every_command_closes_the_store_however_it_ends(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    words: list[str],
) -> None:
    # `batchy enqueue` with an unknown job or an argument that is not JSON, and a
    # worker refusing its options, returned without closing the app's store.
    monkeypatch.chdir(tmp_path)
    marks = tmp_path / "marks"
    name = f"closing_{uuid.uuid4().hex[:8]}"
    app = CLOSING_APP.format(marks=str(marks), db=str(tmp_path / "jobs.db"))
    (tmp_path / f"{name}.py").write_text(app)
    at = 2 if words[0] == "jobs" else 1
    try:
        with pytest.raises(SystemExit):
            main([*words[:at], f"{name}:queue", *words[at:]])
    finally:
        sys.modules.pop(name, None)
    assert marks.read_text() == "closed\n", capsys.readouterr().err


def test_dead_retry_all_says_which_entries_it_left_dead(cli: Cli) -> None:
    # It said "retried 0 dead job(s)" and no more, while `batchy dead list` still
    # showed the entry (its id is a live job's again, so it stays dead by design).
    dead_then_live_again(cli.db, dead=["bad-1", "bad-2"])
    code, out, _ = cli("dead", "retry", "--all")
    assert code == 0
    assert out.splitlines()[1] == (
        "retried 1 dead job(s); 1 left dead, each id a live job's again (enqueued anew), "
        "which a retry would replace: bad-1 (`batchy dead show ID` shows the entry, "
        "`batchy dead delete ID` drops it)"
    )
    assert cli("dead", "retry", "--all")[1].splitlines()[1].startswith("retried 0 dead job(s); 1 ")


def _postgres_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str) -> str:
    """An app module whose queue is ``store`` (a PostgresBackend(...) expression): its spec."""
    monkeypatch.chdir(tmp_path)
    name = f"migrating_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from batchy.jobs import Queue\n"
        "from batchy_contrib.jobs.postgres import PostgresBackend\n"
        f"queue = Queue({store})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:queue"


def _migrate(spec: str, capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["migrate", spec])
    sys.modules.pop(spec.split(":")[0], None)
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_migrate_makes_the_postgres_schema_a_deploy_step(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    postgres_dsn: str,
    postgres_schema: str,
) -> None:
    # The docs said to migrate at deploy time with `await backend.migrate()`: a deploy
    # script had to write Python for it. `batchy migrate APP` runs it, says where the
    # schema is, and fails in one line (exit 2) when it cannot.
    import psycopg

    from batchy_contrib.jobs._postgres_sql import VERSION

    store = f"PostgresBackend({postgres_dsn!r}, schema={postgres_schema!r})"
    spec = _postgres_app(tmp_path, monkeypatch, store)
    for _ in range(2):  # a second run finds it current
        code, out, err = _migrate(spec, capsys)
        assert code == 0, err
        assert out.splitlines() == [
            f"store: PostgreSQL {postgres_dsn} schema {postgres_schema!r}",
            f"job schema {postgres_schema!r} is at version {VERSION}, this release's",
        ]
    with psycopg.connect(postgres_dsn) as conn:
        row = conn.execute(f'SELECT max(version) FROM "{postgres_schema}".version').fetchone()
    assert row == (VERSION,)


def test_migrate_on_a_store_without_a_schema_says_there_is_nothing_to_do(cli: Cli) -> None:
    code, out, _ = cli("migrate")
    assert code == 0
    assert out.splitlines() == [
        f"store: SQLite {cli.db}",
        "nothing to migrate: this store makes (and updates) what it keeps as it opens",
    ]


def test_migrate_that_cannot_reach_the_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = "PostgresBackend('postgresql://postgres@127.0.0.1:1/test')"
    code, _, err = _migrate(_postgres_app(tmp_path, monkeypatch, store), capsys)
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("batchy: error:")]
    assert line.startswith(
        "batchy: error: cannot reach PostgreSQL postgresql://postgres@127.0.0.1:1/test schema "
        "'batchy': OperationalError: connection failed: "
    ), line
    assert "Traceback" not in err
