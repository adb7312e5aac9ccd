"""The jobs guide's PostgreSQL example (transactional enqueue) runs and prints what the guide shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "jobs_postgres.py"
GUIDE = ROOT / "docs" / "guides" / "40-jobs.rst"
PRINTS = ["rolled back: card declined", "refused: ConfigError", "welcomed: [42, 43, 44, 47]"]

pytestmark = pytest.mark.timeout(120)


def test_the_transactional_enqueue_example_prints_what_the_guide_shows(postgres_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), postgres_dsn],
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == PRINTS
    with psycopg.connect(postgres_dsn) as conn:  # it dropped the schema it made
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'batchy_example_%%'"
        ).fetchall()
    assert left == []


def test_the_guide_includes_the_example_and_its_output() -> None:
    text = GUIDE.read_text()
    source = EXAMPLE.read_text()
    for option in ("start-after: # -- transactional enqueue --", "end-before: # -- end --"):
        assert f"   :{option}\n" in text, option
        assert option.split(": ", 1)[1] in source, option
    assert "   :pyobject: flask_view\n" in text and "\ndef flask_view(" in source
    assert text.count(".. literalinclude:: ../../examples/jobs_postgres.py") == 2
    shown = "it prints::\n\n" + "".join(f"    {line}\n" for line in PRINTS)
    assert shown in text
