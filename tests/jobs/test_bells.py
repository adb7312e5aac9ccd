"""Wake-ups between processes when no worker listens yet: cheap for the pusher, none lost."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from batchy.jobs._wake import ABSENT_RETRY, Wakeups


def test_a_push_with_no_listener_tries_the_pipe_again_only_after_a_pause(tmp_path: Path) -> None:
    pusher = Wakeups(str(tmp_path / "wake"))
    assert pusher.bells is not None
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: object) -> int:
        opened.append(path)
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    os.open, saved = counting_open, os.open  # type: ignore[assignment]
    try:
        for _ in range(100):
            pusher.signal(["default"])
        assert len(opened) == 1  # one failed lookup, not one per push
        time.sleep(ABSENT_RETRY * 1.5)
        pusher.signal(["default"])
        assert len(opened) == 2
    finally:
        os.open = saved


async def test_a_new_listener_looks_again_after_the_pushers_pause(tmp_path: Path) -> None:
    directory = str(tmp_path / "wake")
    pusher, worker = Wakeups(directory), Wakeups(directory)
    pusher.signal(["default"])  # no pipe yet: the pusher pauses its retries
    start = time.monotonic()
    # The first wait opens the pipe and returns (the worker looks at the store
    # again) only once a push that skipped the pipe in the meantime has been made.
    await asyncio.wait_for(worker.wait(["default"], 5.0, None), 1.0)
    assert time.monotonic() - start >= 2 * ABSENT_RETRY
    # From then on a push rings the pipe and wakes the listening worker at once.
    waiting = asyncio.ensure_future(worker.wait(["default"], 5.0, None))
    await asyncio.sleep(0.01)
    pusher.signal(["default"])
    await asyncio.wait_for(waiting, 1.0)
    pusher.close()
    worker.close()
