"""Private PostgreSQL, Redis and MariaDB servers that a test may restart, stop and crash.

The shared servers on the standard ports serve every test session at once; a
test that restarts one breaks the others. These run on free ports out of a
temporary directory, one per test session, and are removed when it ends (also
when a test failed; at the interpreter's exit, should the session's own clean-up
not have run).

As root, PostgreSQL and MariaDB run as the ``postgres`` / ``mysql`` user
(``initdb`` and ``mariadbd`` refuse root), in a directory that user owns.
A missing binary fails the test under ``CI=true`` and skips it otherwise.

Importable: tests/conftest.py puts this folder on sys.path.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = ["PrivateMariaDB", "PrivatePostgres", "PrivateRedis", "free_port"]

#: Seconds a server may take to accept connections after a start.
START_WITHIN = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 where nothing listens (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _missing(what: str) -> None:
    """Fail (CI) or skip: ``what`` cannot run here."""
    message = f"{what}: the server-restart tests need it to run a private server"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}; CI needs every server binary")
    pytest.skip(message)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_port(port: int, name: str, log: Path) -> None:
    deadline = time.monotonic() + START_WITHIN
    while not _accepts(port):
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"{name} on port {port} did not start: {tail}")
        time.sleep(0.05)


class _Private:
    """What the three share: a directory, a user to run as, and clean-up at exit."""

    name = ""

    def __init__(self, user: str | None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"batchy-{self.name}-"))
        self.port = free_port()
        self._user = user if os.geteuid() == 0 else None
        if self._user is not None:
            try:
                entry = pwd.getpwnam(self._user)
            except KeyError:
                shutil.rmtree(self.dir, ignore_errors=True)
                _missing(f"no user {self._user!r} to run {self.name} as (not as root)")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        atexit.register(self.remove)

    def run(self, args: Sequence[str]) -> None:
        """``args`` as the server's user; an error says what the command printed."""
        argv = list(args)
        if self._user is not None:
            argv = ["runuser", "-u", self._user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def ensure_up(self) -> None:
        """Started again if a test left it stopped (the next test expects it up)."""
        if not _accepts(self.port):
            with contextlib.suppress(RuntimeError):  # crashed: nothing to stop
                self.stop()
            self.start()

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivatePostgres(_Private):
    """A PostgreSQL cluster of its own (trust auth, user ``postgres``, database ``test``).

    With ``fsync=off``: the crashes here are the server's (``stop("immediate")``),
    never the machine's, and what the server wrote is in the kernel's hands.
    """

    name = "postgres"

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        path = shutil.which("initdb")
        if path is None and not found:
            _missing("no PostgreSQL server binaries (initdb, pg_ctl)")
        self.bin = Path(found[-1] if found else str(path)).parent
        super().__init__("postgres")
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "-A", "trust", "--no-sync", "-E", "UTF8"])  # fmt: skip
        self.start()
        self.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                  "-U", "postgres", "test"])  # fmt: skip

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-o", options, "-w", "-t", str(int(START_WITHIN)), *args])  # fmt: skip

    def start(self) -> None:
        self._ctl("start")
        _wait_port(self.port, "postgres", self.log)

    def stop(self, mode: str = "fast") -> None:
        """``mode`` as pg_ctl's: ``fast`` (clients disconnected, clean), ``immediate`` (a crash)."""
        if (self.data / "postmaster.pid").exists():
            try:
                self._ctl("stop", "-m", mode)
            except RuntimeError:
                with contextlib.suppress(RuntimeError):  # never left behind
                    self._ctl("stop", "-m", "immediate")
                raise

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()


class _Process(_Private):
    """A server that runs as a child process of the tests: ``argv()`` starts it."""

    log = Path()
    proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        devnull = subprocess.DEVNULL
        self.proc = subprocess.Popen(self.argv(), stdout=devnull, stderr=devnull)
        _wait_port(self.port, self.name, self.log)

    def stop(self, crash: bool = False) -> None:
        """SIGTERM (a clean shutdown), or SIGKILL if ``crash`` (or if the shutdown hangs)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        try:
            self.proc.wait(timeout=START_WITHIN)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # never left behind, its directory gone
            self.proc.wait()
            raise
        finally:
            self.proc = None

    def restart(self, crash: bool = False) -> None:
        self.stop(crash)
        self.start()


class PrivateRedis(_Process):
    """A redis-server of its own with the persistence the jobs guide asks for: AOF on, no RDB.

    ``appendfsync everysec`` (Redis's default): an acknowledged write is in the
    file before the reply leaves, so a restart or a killed server loses none of
    them (SIGTERM also flushes it); only the machine's crash can lose the last second.
    """

    name = "redis"

    def __init__(self) -> None:
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            _missing("no redis-server binary")
        super().__init__(None)
        self.log = self.dir / "redis.log"
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        super().start()
        # It takes connections while it loads its AOF, and answers each command with
        # LOADING until it has: the server is back once it answers a PING.
        deadline = time.monotonic() + START_WITHIN
        while time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis on port {self.port} still loading after {START_WITHIN}s")

    def argv(self) -> list[str]:
        return [str(self.exe), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--maxmemory-policy", "noeviction",
                "--logfile", str(self.log)]  # fmt: skip


class PrivateMariaDB(_Process):
    """A mariadbd of its own (user ``root`` without a password, database ``test``)."""

    name = "mariadb"

    def __init__(self) -> None:
        self.exe = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin")
        install = shutil.which("mariadb-install-db")
        if self.exe is None or install is None:
            _missing("no MariaDB server binaries (mariadbd, mariadb-install-db)")
        super().__init__("mysql")
        self.data = self.dir / "data"
        self.log = self.dir / "mariadb.log"
        self.run([str(install), f"--datadir={self.data}", "--auth-root-authentication-method=normal",
                  "--skip-test-db"])  # fmt: skip
        self.start()
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=5)
        with conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE test")

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/test"

    def argv(self) -> list[str]:
        argv = [str(self.exe), "--no-defaults", f"--datadir={self.data}",
                f"--socket={self.dir / 'mysqld.sock'}", f"--port={self.port}",
                "--bind-address=127.0.0.1", f"--log-error={self.log}",
                f"--pid-file={self.dir / 'mysqld.pid'}",
                "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"]  # fmt: skip
        return argv if self._user is None else [*argv, f"--user={self._user}"]
