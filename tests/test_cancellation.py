"""Property tests of cancellation: handlers that cancel themselves and each other at random points.

A program is a few top-level handlers (generator or ``async def``), each a list
of steps run in order. A step may first cancel a task: the handler's own, in one
of the ways code inside a step can (directly, from a done callback, from an
eager child), or another handler's. Then it waits on one thing: an asyncio
future, ``asyncio.sleep(0)``, a loader key, two keys at once, a child task, a
gather of a key and a child, or, right after the handler cancelled itself, an
asyncio future nothing ever resolves. After its last wait a handler may cancel
itself once more, then return. A handler catches ``CancelledError`` at its
waits (and returns ``"caught"``), or does not.

Every wait is a real suspension (no key is asked twice, children and futures
are fresh), so asyncio's rule holds at each: a cancel requested for a task lands
at the task's next wait. For each example:

1. the run ends within a bound (a cancel that never lands waits on the
   never-resolved future for ever);
2. after a successful ``cancel()`` of a handler, its next wait raises
   ``CancelledError``: no wait completes normally in between, and no wait raises
   it without a cancel;
3. each handler ends as its waits say: ``"caught"`` if it caught the error,
   ``CancelledError`` if it let it through or was cancelled after its last wait
   (as asyncio: a task that returns with a cancel pending ends cancelled), else
   with the values of its waits, each the one that wait should give;
4. ``cancelling()`` of an async handler counts the cancels of it that succeeded;
5. every key asked for was loaded, once, by its loader; no task was left running;
6. nothing was logged from an event-loop callback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import batchy

pytestmark = pytest.mark.timeout(300)

BOUND = 2.0  # seconds an example may take; they take milliseconds
MAX_HANDLERS = 4
SELF_CANCELS = ("self", "self from a callback", "self from an eager child")

# -- programs ---------------------------------------------------------------------------

# A cancel before a wait: none, one of the handler's own, or of handler number n
# (modulo the number of handlers; it may be the handler itself).
cancels = st.one_of(st.none(), st.sampled_from(SELF_CANCELS), st.integers(0, MAX_HANDLERS - 1))
waits = st.sampled_from(["future", "sleep0", "key", "keys", "child", "gather", "forever"])


def _step(cancel_wait: tuple[Any, str]) -> tuple[Any, str]:
    # A wait on what never ends only where the handler's own cancel must end it.
    cancel, wait = cancel_wait
    return (cancel, "future" if wait == "forever" and cancel not in SELF_CANCELS else wait)


handlers = st.tuples(
    st.booleans(),  # is_async
    st.booleans(),  # catches CancelledError at its waits
    st.lists(st.tuples(cancels, waits).map(_step), max_size=4),
    st.one_of(st.none(), st.sampled_from(SELF_CANCELS)),  # a cancel after the last wait
)
programs = st.lists(handlers, min_size=1, max_size=MAX_HANDLERS)


# -- running one ------------------------------------------------------------------------


class Run:
    """One example: its handlers' tasks, the keys asked for, and the log of cancels and waits."""

    def __init__(self, program: list[Any]) -> None:
        self.program = program
        self.tasks: list[batchy.Task[Any]] = []
        self.log: list[tuple[Any, ...]] = []  # ("cancel", hid, returned), ("ok", hid, right), ...
        self.asked: dict[int, batchy.Future[str]] = {}
        self.calls: list[tuple[int, list[int]]] = []
        self._keys = itertools.count()
        self._tokens = itertools.count()

        def sync_load(keys: list[int]) -> list[str]:
            self.calls.append((0, keys))
            return [f"L0:{k}" for k in keys]

        async def async_load(keys: list[int]) -> list[str]:
            self.calls.append((1, keys))
            await asyncio.sleep(0)
            return [f"L1:{k}" for k in keys]

        self.loaders = [batchy.batched(sync_load), batchy.batched(async_load)]

    # what handlers do

    def request(self, hid: int, task: Any) -> None:
        self.log.append(("cancel", hid, task.cancel()))

    def cancel(self, hid: int, how: Any, is_async: bool) -> None:
        if how is None:
            return
        if isinstance(how, int):
            target = how % len(self.tasks)
            self.request(target, self.tasks[target])
        elif how == "self":
            me = asyncio.current_task() if is_async else self.tasks[hid]
            assert me is self.tasks[hid]
            self.request(hid, me)
        elif how == "self from a callback":  # a resolved future calls it at once
            batchy.resolved(None).add_done_callback(lambda _: self.request(hid, self.tasks[hid]))
        else:
            batchy.Task(eager_canceller(self, hid)).start_eagerly()

    def key(self) -> tuple[batchy.Future[str], str]:
        k = next(self._keys)
        fut = self.asked[k] = self.loaders[k % 2](k)
        return fut, f"L{k % 2}:{k}"

    def wait(self, wait: str, is_async: bool) -> tuple[Any, Any]:
        """(what to yield or await, the value it gives)."""
        loop = asyncio.get_running_loop()
        if wait in ("future", "forever"):
            fut = loop.create_future()
            token = f"token {next(self._tokens)}"
            if wait == "future":
                loop.call_later(0.001, lambda: fut.done() or fut.set_result(token))
            return fut, token
        if wait == "sleep0":
            return asyncio.sleep(0), None
        if wait == "key":
            return self.key()
        if wait == "keys":
            (a, va), (b, vb) = self.key(), self.key()
            # A generator waits on the pair itself, the idiom the engine runs fastest.
            return (batchy.gather(a, b), [va, vb]) if is_async else ((a, b), (va, vb))
        fut, value = self.key()
        child = (gen_child if is_async else async_child)(fut)
        if wait == "child":
            return child, value
        other, other_value = self.key()
        return batchy.gather(other, child), [other_value, value]


@batchy.task
def gen_child(fut: batchy.Future[str]) -> Any:
    return (yield fut)


@batchy.task
async def async_child(fut: batchy.Future[str]) -> str:
    return await fut


async def eager_canceller(run: Run, hid: int) -> None:
    run.request(hid, run.tasks[hid])


@batchy.task
def gen_handler(run: Run, hid: int) -> Any:
    _, catches, steps, trailing = run.program[hid]
    values = []
    for cancel, wait in steps:
        run.cancel(hid, cancel, False)
        aw, expected = run.wait(wait, False)
        try:
            got = yield aw
        except asyncio.CancelledError:
            run.log.append(("cancelled", hid))
            if catches:
                return "caught"
            raise
        run.log.append(("ok", hid, got == expected))
        values.append(got)
    run.cancel(hid, trailing, False)
    return values


@batchy.task
async def async_handler(run: Run, hid: int) -> Any:
    _, catches, steps, trailing = run.program[hid]
    values = []
    for cancel, wait in steps:
        run.cancel(hid, cancel, True)
        aw, expected = run.wait(wait, True)
        try:
            got = await aw
        except asyncio.CancelledError:
            run.log.append(("cancelled", hid))
            if catches:
                return "caught"
            raise
        run.log.append(("ok", hid, got == expected))
        values.append(got)
    run.cancel(hid, trailing, True)
    return values


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())


def run_program(program: list[Any]) -> tuple[Run, Any, list[str], list[str]]:
    """Run it under the bound: (run, outcomes or the error, asyncio's logs, warnings)."""
    run = Run(program)

    async def root() -> Any:
        run.tasks = [
            (async_handler if spec[0] else gen_handler)(run, hid)
            for hid, spec in enumerate(program)
        ]
        outcomes = await batchy.gather(*run.tasks, return_exceptions=True)
        # Every key asked for, awaited: a key a cancelled handler left is loaded too.
        await batchy.gather(*run.asked.values())
        return outcomes

    capture = _Capture()
    logger = logging.getLogger("asyncio")
    logger.addHandler(capture)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcomes: Any = batchy.run(asyncio.wait_for(root(), BOUND))
            except BaseException as error:
                outcomes = error
    finally:
        logger.removeHandler(capture)
    return run, outcomes, capture.texts, [str(w.message) for w in caught]


# -- the properties ---------------------------------------------------------------------


def problems(run: Run, outcomes: Any) -> list[str]:
    """What breaks properties 2 to 5 (the run ended: ``outcomes`` is a list)."""
    found = []
    for hid, ((is_async, catches, steps, _), task, outcome) in enumerate(
        zip(run.program, run.tasks, outcomes, strict=True)
    ):
        pending = saw = False
        cancels = 0
        for event in run.log:
            if event[1] != hid:
                continue
            if event[0] == "cancel" and event[2]:
                pending = True
                cancels += 1
            elif event[0] == "ok":
                if pending:
                    found.append(f"handler {hid}: a wait ended normally after a cancel")
                if not event[2]:
                    found.append(f"handler {hid}: a wait gave the wrong value")
            elif event[0] == "cancelled":
                if not pending:
                    found.append(f"handler {hid}: CancelledError at a wait, with no cancel")
                pending, saw = False, True
        if saw and catches:
            expected: Any = "caught"
        elif saw or pending:
            expected = "CancelledError"
        else:
            expected = f"{len(steps)} values"
        got = (
            type(outcome).__name__
            if isinstance(outcome, BaseException)
            else outcome
            if outcome == "caught"
            else f"{len(outcome)} values"
        )
        if got != expected:
            found.append(f"handler {hid} ended with {got!r}, expected {expected!r}")
        if is_async and task.cancelling() != cancels:  # type: ignore[attr-defined]
            found.append(
                f"handler {hid}: cancelling() is {task.cancelling()}, "  # type: ignore[attr-defined]
                f"{cancels} cancel(s) succeeded"
            )
    loaded = sorted(k for _, keys in run.calls for k in keys)
    if loaded != sorted(run.asked):
        found.append(f"keys loaded {loaded}, asked for {sorted(run.asked)}")
    if any(k % 2 != loader for loader, keys in run.calls for k in keys):
        found.append(f"a loader got another's keys: {run.calls}")
    return found


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs)
def test_cancels_land_where_handlers_wait_and_every_task_ends(program: list[Any]) -> None:
    run, outcomes, logs, warned = run_program(program)
    assert not isinstance(outcomes, BaseException), (
        f"the run did not end as it should: {outcomes!r}; log: {run.log}"
    )
    assert logs == [], f"logged from an event-loop callback: {logs}"
    assert warned == [], f"tasks left running: {warned}"
    found = problems(run, outcomes)
    assert found == [], f"{found}; log: {run.log}"
