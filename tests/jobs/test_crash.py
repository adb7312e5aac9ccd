"""The short crash test: killed, paused and skewed workers lose nothing and keep key order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def test_quick_crash_test(redis_server: tuple[str, int]) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "crash_test.py"), "--quick"],
        capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for store in ("redis", "sqlite"):
        assert f"store: {store}" in out
    assert out.count("ordered jobs lost:               0") == 2, out
    assert out.count("per-key order violations:        0") == 2, out
    assert out.count("sharded rows missed:             0") == 2, out
    # Workers really died, and were paused past their lease, mid-run (otherwise the
    # test proves nothing); one worker's clock was off all along.
    assert "(0 workers killed" not in out, out
    assert " 0 paused with SIGSTOP" not in out, out
    assert "one worker's clock +10/-10 s off" in out, out
