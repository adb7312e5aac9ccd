"""The Operations guide's example of the management API runs and prints what the guide shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def test_operate_jobs_example(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "operate_jobs.py"), str(tmp_path / "jobs.db")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "retrying mail [2] attempts=1 ConnectionError: smtp down",
        "ConnectionError: smtp down",
        "next run in 600s",
        "[('report', 'ValueError: no data for 2026-01-01 (failed 1 time(s); retries=0 exhausted)')]",
        "retried 1",
        "JobNotFound job no-such-id",
        "busy 1/5",
        "cancelled",
    ]
