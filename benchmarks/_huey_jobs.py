"""huey's side of the pick-up latency benchmark: the app its consumer runs (``huey_consumer``).

``benchmarks.jobs`` enqueues through :data:`HUEY` and starts huey's consumer,
``huey_consumer benchmarks._huey_jobs.HUEY -k greenlet -w 100``, in a process
that applies gevent's monkey-patch first (huey leaves that to its user). Each
task notes how long after
its timestamp it started; once ``BATCHY_BENCH_LAG_TOTAL`` tasks ran, the
consumer prints them as one JSON line, as the other systems' workers do.
"""

from __future__ import annotations

import json
import os
import sys
import time

from huey import RedisHuey

HUEY = RedisHuey("batchy-bench", host="127.0.0.1", port=6379, db=12, results=False)
LAGS: dict[int, list[float]] = {}
TOTAL = int(os.environ.get("BATCHY_BENCH_LAG_TOTAL", "0"))
_READY: list[bool] = []


@HUEY.on_startup()
def _ready() -> None:
    if not _READY:  # once, not once per greenlet
        _READY.append(True)
        print("ready", flush=True)


@HUEY.task()
def huey_lat(phase: int, at: float) -> None:
    LAGS.setdefault(phase, []).append(time.time() - at)
    if sum(len(v) for v in LAGS.values()) == TOTAL:
        sys.stdout.write(json.dumps({"lags": LAGS}) + "\n")
        sys.stdout.flush()
