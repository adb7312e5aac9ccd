"""batchy.jobs exports exactly its public names and uses only batchy's public API."""

from __future__ import annotations

import ast
from pathlib import Path

import batchy.jobs

ROOT = Path(__file__).resolve().parents[2]


EXPECTED = {
    "Activity",
    "Admin",
    "ArgumentError",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "JobStateError",
    "PeriodicInfo",
    "RunInfo",
    "ShardInfo",
    "StoredJob",
    "Backend",
    "Backoff",
    "Claimed",
    "Claims",
    "ConfigError",
    "Cron",
    "COUNTS_KEPT",
    "DEAD_MAX",
    "DEAD_MAX_AGE",
    "DEFAULT_RETRIES",
    "DeadJob",
    "DeadJobError",
    "DelayError",
    "Envelope",
    "Every",
    "Handle",
    "Info",
    "JSONSerializer",
    "JobCall",
    "JobDefinitionError",
    "JobError",
    "JobEvent",
    "JobHook",
    "JobStatus",
    "JobTimeout",
    "JobType",
    "KeyInfo",
    "LeaseLost",
    "MemoryBackend",
    "NoRetry",
    "Outcome",
    "PayloadError",
    "Periodic",
    "Queue",
    "QueueInfo",
    "ResultNotKept",
    "Retry",
    "Running",
    "SQLiteBackend",
    "Schedule",
    "ShardedJob",
    "SerializationError",
    "Serializer",
    "TextError",
    "UnknownJobError",
    "Worker",
    "WorkerInfo",
    "parse_queues",
    "sidekiq_backoff",
}


def test_exported_names() -> None:
    assert set(batchy.jobs.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(batchy.jobs, name), name


def test_jobs_use_only_public_engine_api() -> None:
    files = [
        *sorted((ROOT / "batchy" / "jobs").glob("*.py")),
        *sorted((ROOT / "batchy_contrib" / "jobs").glob("*.py")),
    ]
    files.append(ROOT / "batchy" / "__main__.py")
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                assert not (parts[0] == "batchy" and any(p.startswith("_") for p in parts)), (
                    f"{path.name} imports private {node.module}"
                )
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "batchy":
                    assert not node.attr.startswith("_"), f"{path.name} uses batchy.{node.attr}"


def test_every_module_says_what_it_owns() -> None:
    for path in sorted((ROOT / "batchy" / "jobs").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and doc.split("\n")[0].endswith("."), path.name
        assert len(path.read_text().splitlines()) <= 420, path.name
