"""The short crash test on PostgreSQL: also with its LISTEN connections killed, nothing is lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(90)


def test_quick_crash_test_on_postgres(postgres_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "crash_test.py"), "--quick", "--store", "postgres"],
        capture_output=True, text=True, timeout=80, check=False,
        env={**os.environ, "BATCHY_CRASH_POSTGRES": postgres_dsn},
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "store: postgres" in out and out.rstrip().endswith("OK"), out
    assert "ordered jobs lost:               0" in out, out
    assert "per-key order violations:        0" in out, out
    assert "sharded rows missed:             0" in out, out
    # Workers really died, were paused past their lease and lost their LISTEN
    # connection mid-run (otherwise the test proves nothing), and every one whose
    # connection was killed listened again.
    assert "(0 workers killed" not in out, out
    assert " 0 paused with SIGSTOP" not in out, out
    assert "one worker's clock +10/-10 s off" in out, out
    killed = re.search(r"LISTEN connections killed: +(\d+) .*\((\d+) not within", out)
    assert killed is not None, out
    assert int(killed[1]) >= 1 and killed[2] == "0", out
