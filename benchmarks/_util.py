"""Shared benchmark plumbing: medians over repeated runs and a table of ratios to peers."""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from queue import Empty, SimpleQueue
from typing import Any


def median_time(fn: Callable[[], Any], *, repeat: int = 9, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` in seconds (after ``warmup`` unmeasured runs)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (also valid reStructuredText simple-table-ish markdown)."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title, line]
    for i, r in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        if i == 0:
            out.append(line)
    out.append(line)
    return "\n".join(out)


def ratio(peer: float, ours: float) -> str:
    """How many times faster we are than ``peer`` (``peer / ours``)."""
    return f"{peer / ours:.1f}x" if ours > 0 else "n/a"


def median_times(
    fns: Mapping[str, Callable[[], Any]],
    *,
    repeat: int = 9,
    warmup: int = 1,
    repeat_for: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """:func:`median_time` of several functions, their runs interleaved round-robin.

    Interleaving makes a burst of load from elsewhere on the machine hit every
    function alike instead of whichever happened to be running. ``repeat_for``
    gives some functions fewer (or more) measured runs than ``repeat``.
    """
    counts = {name: (repeat_for or {}).get(name, repeat) for name in fns}
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(max(counts.values(), default=0)):
        for name, fn in fns.items():
            if i >= counts[name]:
                continue
            gc.collect()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def measure_latency_worker(
    name: str, cmd: list[str], client: Callable[[], Any], *, cwd: Any, env: Any = None
) -> dict[Any, Any]:
    """Run a latency worker process: wait for its "ready" line, run ``client()`` (which
    enqueues and returns the rate it reached), read the worker's JSON lags, and return
    ``{"reached": ..., phase: (p50, p99), ...}`` in seconds."""
    lines: SimpleQueue[str] = SimpleQueue()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        )  # fmt: skip

        def read() -> None:
            if proc.stdout is not None:
                for line in proc.stdout:
                    lines.put(line)
            lines.put("")  # the worker exited

        def expect(prefix: str, timeout: float) -> str:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except Empty:
                    line = ""
                if line.startswith(prefix):
                    return line
                if not line:
                    err.seek(0)
                    tail = err.read()[-3000:]
                    raise RuntimeError(f"{name} latency worker: no {prefix!r}:\n{tail}")

        threading.Thread(target=read, daemon=True).start()
        try:
            expect("ready", 60)
            reached = client()
            lags = {int(k): v for k, v in json.loads(expect("{", 60))["lags"].items()}
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    row: dict[Any, Any] = {"reached": reached}
    for phase, values in lags.items():
        cuts = statistics.quantiles(values, n=100)
        row[phase] = (statistics.median(values), cuts[98])
    return row
