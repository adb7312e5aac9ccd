"""Chaos: random trees of handlers and loaders, with hostile behaviour at random points.

The trees are those of the property tests (tests/tree_helpers.py), with more kinds
of nodes and of loaders:

- loaders that raise (``Exception`` subclasses, and ``BaseException`` subclasses that
  are not: a custom one, ``asyncio.CancelledError``, ``GeneratorExit``), return the
  wrong number of values or the wrong type, or return a mapping with missing and
  extra keys; keys and values whose ``repr`` raises; values that are exceptions;
- ``("catch", is_async, "exc" | "base", child)``: a handler that catches the error of
  its child (``Exception`` or ``BaseException``) and yields something else instead;
- ``("cancel", is_async, after, pick, child)``: a handler that starts ``child`` and,
  after ``after`` rounds, calls ``cancel()`` on one of the tasks of that subtree
  (number ``pick``, modulo their number, in preorder: 0 is ``child`` itself);
- ``("unhashable", is_async, loader, "list" | "dict")``: a handler that calls a loader
  with an unhashable key, catches the error, and loads something else;
- ``("cycle1", is_async, catch)``: a task that yields itself;
  ``("cycle2", a_async, b_async, catch_a, catch_b, via_gather)``: two tasks that
  yield each other (``a`` through a parallel yield when ``via_gather``).

Each example runs ``batchy.run`` in a thread under a hard time bound (a watchdog
also notices a run that can no longer make progress, so a hang fails in a fraction
of a second). Then, for every example:

1. the run ended;
2. every handler that started got a value or an error;
3. every handler's outcome is that of a plain sequential evaluation of the same
   tree (the ``Model`` below), which also states the expected error semantics;
   only inside a cancelled subtree may a handler end with ``CancelledError``
   instead (or with anything, below a handler that catches ``BaseException``);
4. nothing was logged from an event-loop callback.

``pytest --chaos-long`` runs thousands of examples per test instead of dozens.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tree_helpers import (
    FAILING_KEYS,
    KeyFailed,
    handler_nodes,
    handler_trees,
    load_leaves,
    value_of,
)

import batchy

# Each example has its own bounds; shrinking a run of hanging examples takes a while.
pytestmark = pytest.mark.timeout(900)

# ``CycleError`` is new: the module must import on engines that lack it.
CycleError: Any = getattr(batchy, "CycleError", None)


class _NoCycleError(Exception):
    """Stands in for ``batchy.CycleError`` where there is none: never raised."""


CYCLE_CATCH: type[BaseException] = CycleError if CycleError is not None else _NoCycleError

# -- hostile values and keys ------------------------------------------------------------

N_LOADERS = 4  # loader 0 is well-behaved: it gives the fallback values
FALLBACK_KEY = 1
MISSING_KEYS = frozenset({5})  # left out of the mappings that mapping loaders return
BAD_REPR_KEYS = frozenset({4, 7})  # passed to loaders as keys whose repr raises
BAD_REPR_VALUE_KEYS = frozenset({2})  # their value's repr raises


class BadReprKey(int):
    """An int key whose repr and str raise (like a detached ORM row)."""

    def __repr__(self) -> str:
        raise RuntimeError("repr of a key failed")

    __str__ = __repr__


class BadReprValue:
    """A value whose repr raises; equal to another with the same text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return type(other) is BadReprValue and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        raise RuntimeError("repr of a value failed")


class Boom(Exception):
    """What a raising loader raises (an ``Exception``)."""

    def __init__(self, loader: str) -> None:
        super().__init__(f"boom from {loader}")
        self.loader = loader


class ChaosBase(BaseException):
    """A ``BaseException`` that is not an ``Exception`` (nor KeyboardInterrupt / SystemExit)."""


#: Loader behaviours that fail every key of a call with a BaseException, and its name.
BASE_RAISES: dict[str, Callable[[], BaseException]] = {
    "raise-base": ChaosBase,
    "raise-cancelled": asyncio.CancelledError,
    "raise-genexit": GeneratorExit,
}
WELL_BEHAVED = ("ok", "map")
CONTRACT_BREAKING = ("raise", "short", "long", "wrong-type")
WRONG_TYPES: tuple[Any, ...] = (None, 42, "abc", BadReprValue("not a list"), frozenset({1}))


def key_object(k: int) -> Any:
    return BadReprKey(k) if k in BAD_REPR_KEYS else k


def value_for(loader: int, k: int) -> Any:
    """The value (or exception instance) a well-behaved loader returns for ``k``."""
    if k in FAILING_KEYS:
        return KeyFailed(loader, k)
    if k in BAD_REPR_VALUE_KEYS:
        return BadReprValue(value_of(loader, k))
    return value_of(loader, k)


def expected_value(loader: int, k: int) -> Any:
    return (
        norm(BadReprValue(value_of(loader, k))) if k in BAD_REPR_VALUE_KEYS else value_of(loader, k)
    )


def answer(index: int, name: str, behaviour: str, keys: list[Any]) -> Any:
    """What loader number ``index`` does with ``keys``."""
    if behaviour == "raise":
        raise Boom(name)
    if behaviour in BASE_RAISES:
        raise BASE_RAISES[behaviour]()
    values = [value_for(index, int(k)) for k in keys]
    if behaviour == "short":
        return values[:-1]
    if behaviour == "long":
        return [*values, BadReprValue("one too many")]
    if behaviour == "wrong-type":
        return WRONG_TYPES[len(keys) % len(WRONG_TYPES)]
    if behaviour == "map":
        out: dict[Any, Any] = {k: v for k, v in zip(keys, values) if int(k) not in MISSING_KEYS}
        out.update({1000 + int(k): "extra" for k in keys})  # keys nobody asked for
        return out
    return values


# Loader specs: (behaviour, is_async, cache, max_batch_size[, max_concurrency])
Spec = tuple[Any, ...]


def make_loader(index: int, spec: Spec) -> batchy.Loader[Any, Any]:
    behaviour, is_async, cache, max_batch_size, *more = spec
    max_concurrency = more[0] if more else None
    name = f"L{index}"
    fn: Any
    if is_async:

        async def fn(keys: list[Any]) -> Any:
            await asyncio.sleep(0)
            return answer(index, name, behaviour, keys)

    else:

        def fn(keys: list[Any]) -> Any:
            return answer(index, name, behaviour, keys)

    return batchy.batched(
        fn, name=name, cache=cache, max_batch_size=max_batch_size, max_concurrency=max_concurrency
    )


# -- normalised outcomes ----------------------------------------------------------------


def norm(value: Any) -> Any:
    """A comparable, printable form of a handler's value."""
    if isinstance(value, BadReprValue):
        return ("bad-repr", value.text)
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, tuple):
        return tuple(norm(v) for v in value)
    return value


def _text(error: BaseException) -> str:
    try:
        return str(error)[:160]
    except Exception:
        return "<str failed>"


def label(error: BaseException) -> str:
    """What the model says about an error: its kind, and the facts the spec promises."""
    if isinstance(error, batchy.LoaderError):
        cause = error.__cause__
        if cause is None:
            return "LoaderError"
        if isinstance(cause, Boom):
            same = cause.loader == error.loader
            return "LoaderError(Boom)" if same else f"LoaderError(Boom from {cause.loader})"
        if isinstance(cause, Exception):
            return f"LoaderError({type(cause).__name__}: {_text(cause)})"
        return f"base:{type(cause).__name__}"  # wrapping a BaseException is allowed
    if isinstance(error, KeyFailed):
        return f"KeyFailed{error.args}"
    if isinstance(error, batchy.MissingKeyError):
        try:
            return f"MissingKeyError({int(error.key)})"
        except Exception:
            return "MissingKeyError(?)"
    if CycleError is not None and isinstance(error, CycleError):
        return "CycleError"
    if not isinstance(error, Exception):
        return f"base:{type(error).__name__}"
    return f"{type(error).__name__}: {_text(error)}"


CANCELLED = ("error", "base:CancelledError")

# -- the handlers -----------------------------------------------------------------------


class Node:
    """One node of a generated tree, with a path-like id ("r.0.2")."""

    def __init__(self, raw: Any, id: str) -> None:
        self.raw = raw
        self.id = id
        self.kind: str = raw[0]
        self.children: list[Node] = []
        self.is_async = False
        if self.kind == "load":
            self.loader, self.key = raw[1], raw[2]
        elif self.kind in ("seq", "par"):
            self.is_async = raw[1]
            self.children = [Node(c, f"{id}.{i}") for i, c in enumerate(raw[2])]
            self.shape = ("list", "tuple", "dict")[len(raw[2]) % 3]
        elif self.kind == "catch":
            self.is_async, self.catching = raw[1], raw[2]
            self.children = [Node(raw[3], f"{id}.0")]
        elif self.kind == "cancel":
            self.is_async, self.after, pick, child = raw[1:]
            if child[0] == "load":
                child = ("seq", False, [child])  # only a task can be cancelled
            self.children = [Node(child, f"{id}.0")]
            tasks = list(self.children[0].task_ids())
            self.victim = tasks[pick % len(tasks)]
        elif self.kind == "unhashable":
            self.is_async, self.loader, self.container = raw[1], raw[2], raw[3]
        elif self.kind == "cycle1":
            self.is_async, self.catch_a = raw[1], raw[2]
        elif self.kind == "cycle2":
            _, self.is_async, self.b_async, self.catch_a, self.catch_b, self.via_gather = raw
        else:
            raise AssertionError(f"unknown node {raw!r}")

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def task_ids(self) -> Iterator[str]:
        """The ids of the tasks of this subtree (loads are none), in preorder."""
        for node in self.walk():
            if node.kind != "load":
                yield node.id
            if node.kind == "cycle2":
                yield f"{node.id}/b"


class Run:
    """One example's loaders and what its handlers observed."""

    def __init__(self, specs: list[Spec]) -> None:
        self.specs = specs
        self.loaders = [make_loader(i, spec) for i, spec in enumerate(specs)]
        self.delay = batchy.batched(lambda keys: keys, name="delay", cache=False)
        self.started: dict[str, str] = {}  # id -> kind
        self.outcomes: dict[str, tuple[Any, ...]] = {}
        self.twice: list[str] = []
        self.cancel_seen: dict[str, tuple[Any, ...]] = {}
        self.tasks: dict[str, batchy.Task[Any]] = {}  # id -> task, for the killers
        self.kills: dict[str, str] = {}  # cancel node id -> what its killer did

    def start(self, id: str, kind: str) -> None:
        self.started[id] = kind

    def end(self, id: str, value: Any = None, error: BaseException | None = None) -> None:
        if id in self.outcomes:
            self.twice.append(id)
        self.outcomes[id] = ("value", norm(value)) if error is None else ("error", label(error))

    def load(self, node: Node) -> batchy.Future[Any]:
        return self.loaders[node.loader](key_object(node.key))

    def fallback(self) -> batchy.Future[Any]:
        return self.loaders[0](FALLBACK_KEY)

    def unhashable(self, node: Node) -> str:
        key: Any = [node.id] if node.container == "list" else {"id": node.id}
        try:
            self.loaders[node.loader](key)
        except Exception as error:
            if isinstance(error, batchy.UsageError) and isinstance(error, TypeError):
                return "ok"
            return f"raised {type(error).__name__}: {_text(error)}"
        return "no error"

    def build(self, node: Node) -> batchy.Future[Any]:
        if node.kind == "load":
            return self.load(node)
        if node.kind in ("cycle1", "cycle2"):
            holder: list[Any] = []
            peer = node if node.kind == "cycle2" else None
            via = node.kind == "cycle2" and node.via_gather
            holder.append(cycle_task(node.is_async)(holder, peer, node.catch_a, via, node.id, self))
            task = holder[0]
        else:
            task = (async_node if node.is_async else gen_node)(node, self)
        self.tasks[node.id] = task
        return task


def _shaped(futs: list[Any], shape: str) -> Any:
    if shape == "tuple":
        return tuple(futs)
    if shape == "dict":
        return {str(i): f for i, f in enumerate(futs)}
    return futs


def _unshaped(value: Any, shape: str) -> list[Any]:
    if shape == "dict":
        return [value[str(i)] for i in range(len(value))]
    return list(value)


def _catching(node: Node) -> type[BaseException]:
    return BaseException if node.catching == "base" else Exception


@batchy.task
def gen_node(node: Node, run: Run) -> Any:
    run.start(node.id, node.kind)
    try:
        kind = node.kind
        if kind == "seq":
            value = []
            for child in node.children:
                value.append((yield run.build(child)))
        elif kind == "par":
            futs = [run.build(child) for child in node.children]
            value = _unshaped((yield _shaped(futs, node.shape)), node.shape)
        elif kind == "catch":
            try:
                value = yield run.build(node.children[0])
            except _catching(node) as error:
                value = ("caught", label(error), (yield run.fallback()))
        elif kind == "cancel":
            target = run.build(node.children[0])
            got = yield batchy.gather(target, killer(node, target, run), return_exceptions=True)
            run.cancel_seen[node.id] = _observed(got[0])
            value = "cancel-done"
        elif kind == "unhashable":
            status = run.unhashable(node)
            value = ("unhashable", status, (yield run.fallback()))
        else:
            raise AssertionError(kind)
    except BaseException as error:
        run.end(node.id, error=error)
        raise
    run.end(node.id, value)
    return value


@batchy.task
async def async_node(node: Node, run: Run) -> Any:
    run.start(node.id, node.kind)
    try:
        kind = node.kind
        if kind == "seq":
            value = [await run.build(child) for child in node.children]
        elif kind == "par":
            value = await batchy.gather(*(run.build(child) for child in node.children))
        elif kind == "catch":
            try:
                value = await run.build(node.children[0])
            except _catching(node) as error:
                value = ("caught", label(error), await run.fallback())
        elif kind == "cancel":
            target = run.build(node.children[0])
            got = await batchy.gather(target, killer(node, target, run), return_exceptions=True)
            run.cancel_seen[node.id] = _observed(got[0])
            value = "cancel-done"
        elif kind == "unhashable":
            status = run.unhashable(node)
            value = ("unhashable", status, await run.fallback())
        else:
            raise AssertionError(kind)
    except BaseException as error:
        run.end(node.id, error=error)
        raise
    run.end(node.id, value)
    return value


def _observed(result: Any) -> tuple[Any, ...]:
    return (
        ("error", label(result)) if isinstance(result, BaseException) else ("value", norm(result))
    )


@batchy.task
def killer(node: Node, target: batchy.Task[Any], run: Run) -> Any:
    """Waits ``after`` rounds, then cancels the victim: ``target`` or a task below it."""
    id = f"{node.id}/kill"
    run.start(id, "kill")
    try:
        for i in range(node.after):
            yield run.delay(i)
        victim = run.tasks.get(node.victim)
        if victim is None:
            run.kills[node.id] = f"{node.victim} not made yet: nothing to cancel"
        else:
            run.kills[node.id] = f"{node.victim}.cancel() -> {victim.cancel()}"
    except BaseException as error:
        run.end(id, error=error)
        raise
    run.end(id, "killer-done")
    return "killer-done"


@batchy.task
def gen_cycle(
    holder: list[Any], peer: Node | None, catch: bool, via: bool, id: str, run: Run
) -> Any:
    run.start(id, "cycle")
    try:
        try:
            other = _other(holder, peer, run)
            got = yield ([run.fallback(), other] if via else other)
        except CYCLE_CATCH:
            if not catch:
                raise
            value: Any = "cycle-caught"
        else:
            value = ("got", got)
    except BaseException as error:
        run.end(id, error=error)
        raise
    run.end(id, value)
    return value


@batchy.task
async def async_cycle(
    holder: list[Any], peer: Node | None, catch: bool, via: bool, id: str, run: Run
) -> Any:
    run.start(id, "cycle")
    try:
        try:
            other = _other(holder, peer, run)
            if via:
                got = await batchy.gather(run.fallback(), other)
            else:
                got = await other
        except CYCLE_CATCH:
            if not catch:
                raise
            value: Any = "cycle-caught"
        else:
            value = ("got", got)
    except BaseException as error:
        run.end(id, error=error)
        raise
    run.end(id, value)
    return value


def cycle_task(is_async: bool) -> Any:
    return async_cycle if is_async else gen_cycle


def _other(holder: list[Any], peer: Node | None, run: Run) -> Any:
    """What a task of a cycle waits on: the cycle's first task, or (``peer``) a new second one.

    The first task of ``("cycle2", ...)`` makes the second when it runs, so that a
    first task that never runs leaves no handler that was never started.
    """
    if peer is None:
        return holder[0]
    id = f"{peer.id}/b"
    run.tasks[id] = cycle_task(peer.b_async)(holder, None, peer.catch_b, False, id, run)
    return run.tasks[id]


# -- the model: a plain sequential evaluation --------------------------------------------


class Outcome:
    """A handler's expected outcome; ``is_exception``: whether ``except Exception`` catches it."""

    __slots__ = ("is_exception", "key")

    def __init__(self, key: tuple[Any, ...], is_exception: bool = True) -> None:
        self.key = key
        self.is_exception = is_exception

    @property
    def failed(self) -> bool:
        return self.key[0] == "error"


def val(value: Any) -> Outcome:
    return Outcome(("value", value))


def err(what: str, is_exception: bool = True) -> Outcome:
    return Outcome(("error", what), is_exception)


class Model:
    """Expected outcomes of every handler a sequential evaluation runs.

    ``wrapped[i]``: whether loader ``i``'s BaseException reaches handlers wrapped in
    a LoaderError (an ``Exception``) or as it is; either is allowed, but one per loader.
    """

    def __init__(self, specs: list[Spec], wrapped: dict[int, bool]) -> None:
        self.specs = specs
        self.wrapped = wrapped
        self.expected: dict[str, Outcome] = {}
        self.cancelled_region: dict[str, bool] = {}  # in a subtree that may be cancelled
        self.loose: dict[str, bool] = {}  # ... below a handler that catches BaseException

    def leaf(self, loader: int, k: int) -> Outcome:
        behaviour = self.specs[loader][0]
        if behaviour == "raise":
            return err("LoaderError(Boom)")
        if behaviour in BASE_RAISES:
            name = type(BASE_RAISES[behaviour]()).__name__
            return err(f"base:{name}", self.wrapped[loader])
        if behaviour in ("short", "long", "wrong-type"):
            return err("LoaderError")
        if k in FAILING_KEYS:
            return err(f"KeyFailed({loader}, {k})")
        if behaviour == "map" and k in MISSING_KEYS:
            return err(f"MissingKeyError({k})")
        return val(expected_value(loader, k))

    def fallback(self) -> Any:
        return expected_value(0, FALLBACK_KEY)

    def note(self, id: str, outcome: Outcome, region: bool, loose: bool) -> Outcome:
        self.expected[id] = outcome
        self.cancelled_region[id] = region
        self.loose[id] = region and loose
        return outcome

    def eval(self, node: Node, region: bool = False) -> Outcome:
        kind = node.kind
        if kind == "load":
            return self.leaf(node.loader, node.key)
        loose = any(n.kind == "catch" and n.catching == "base" for n in node.walk())
        if kind == "seq":
            values = []
            for child in node.children:
                got = self.eval(child, region)
                if got.failed:
                    return self.note(node.id, got, region, loose)
                values.append(got.key[1])
            return self.note(node.id, val(values), region, loose)
        if kind == "par":
            results = [self.eval(child, region) for child in node.children]
            first = next((r for r in results if r.failed), None)
            out = first if first is not None else val([r.key[1] for r in results])
            return self.note(node.id, out, region, loose)
        if kind == "catch":
            got = self.eval(node.children[0], region)
            if got.failed and (node.catching == "base" or got.is_exception):
                got = val(("caught", got.key[1], self.fallback()))
            return self.note(node.id, got, region, loose)
        if kind == "cancel":
            self.eval(node.children[0], True)
            self.note(f"{node.id}/kill", val("killer-done"), region, loose)
            return self.note(node.id, val("cancel-done"), region, loose)
        if kind == "unhashable":
            return self.note(node.id, val(("unhashable", "ok", self.fallback())), region, loose)
        if kind == "cycle1":
            out = val("cycle-caught") if node.catch_a else err("CycleError")
            return self.note(node.id, out, region, loose)
        if kind == "cycle2":
            b = val("cycle-caught") if node.catch_b else err("CycleError")
            self.note(f"{node.id}/b", b, region, loose)
            got = b
            if node.via_gather and not b.failed:
                got = val([self.fallback(), b.key[1]])
            if got.failed:
                a = val("cycle-caught") if node.catch_a else got
            else:
                a = val(("got", got.key[1]))
            return self.note(node.id, a, region, loose)
        raise AssertionError(kind)


def model_problems(root: Node, run: Run, model: Model) -> list[str]:
    model.eval(root)
    problems = []
    for id, outcome in model.expected.items():
        want = outcome.key
        got = run.outcomes.get(id)
        if model.cancelled_region[id]:
            if got is not None and got not in (want, CANCELLED) and not model.loose[id]:
                problems.append(f"{id}: got {got}, expected {want} or CancelledError (cancelled)")
        elif id not in run.started:
            problems.append(f"{id}: never ran; expected {want}")
        elif got is not None and got != want:
            problems.append(f"{id}: got {got}, expected {want}")
    for id in run.started:
        if id not in model.expected:
            problems.append(f"{id}: ran, but a sequential evaluation never gets to it")
    for id, seen in run.cancel_seen.items():
        target = f"{id}.0"
        if target not in model.expected:
            continue  # reported above: the cancel node should not have run
        want = model.expected[target].key
        if seen not in (want, CANCELLED) and not model.loose[target]:
            problems.append(f"{id}: the cancelled task ended {seen}; expected {want} or cancelled")
    return problems


def check_against_model(root: Node, run: Run) -> None:
    """The run's outcomes equal the model's, for one way of treating each raising loader."""
    base = [i for i, spec in enumerate(run.specs) if spec[0] in BASE_RAISES]
    best: list[str] | None = None
    for choice in itertools.product((False, True), repeat=len(base)):
        problems = model_problems(root, run, Model(run.specs, dict(zip(base, choice))))
        if not problems:
            return
        if best is None or len(problems) < len(best):
            best = problems
    assert best is not None
    kills = f"\ncancellations: {run.kills}" if run.kills else ""
    raise AssertionError(
        "outcomes differ from a sequential evaluation:\n  " + "\n  ".join(best[:20]) + kills
    )


# -- running an example under a bound ---------------------------------------------------

HARD_SECONDS = 5.0  # wall clock: a busy loop that never ends
STALL_CHECK = 0.02  # the watchdog looks this often for a loop with nothing left to do...
STALL_CHECKS = 3  # ...and calls it a hang after this many looks in a row


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" [{type(record.exc_info[1]).__name__}: {_text(record.exc_info[1])}]"
        self.texts.append(f"{record.name}: {text}")


def _watch(state: types.SimpleNamespace) -> None:
    """Cancel the main task once the loop has nothing left to run but it is not done."""
    loop = state.loop

    def check() -> None:
        if state.main.done():
            return
        busy = any(not h.cancelled() for h in loop._ready) or any(
            not h.cancelled() for h in loop._scheduled
        )
        state.idle = 0 if busy else state.idle + 1
        if state.idle >= STALL_CHECKS:
            state.stalled = True
            state.main.cancel()
            return
        loop.call_later(STALL_CHECK, check)

    loop.call_later(STALL_CHECK, check)


def run_bounded(make_root: Callable[[], batchy.Future[Any]]) -> types.SimpleNamespace:
    """Run the root in ``batchy.run`` on a thread; ``.outcome``, ``.error``, ``.hang``, ``.logs``."""
    state = types.SimpleNamespace(
        loop=None, main=None, idle=0, stalled=False, outcome=None, error=None, hang=None
    )

    async def main() -> tuple[str, Any]:
        state.loop = asyncio.get_running_loop()
        state.main = asyncio.current_task()
        _watch(state)
        try:
            return ("value", await make_root())
        except BaseException as error:
            if state.stalled or state.main.cancelling():
                raise
            return ("error", error)

    def target() -> None:
        try:
            state.outcome = batchy.run(main())
        except BaseException as error:
            state.error = error

    capture = _Capture()
    loggers = [logging.getLogger("asyncio"), logging.getLogger("batchy")]
    for logger in loggers:
        logger.addHandler(capture)
    try:
        thread = threading.Thread(target=target, name="chaos-example", daemon=True)
        started = time.monotonic()
        thread.start()
        thread.join(HARD_SECONDS)
        if thread.is_alive():
            state.hang = f"did not end within {HARD_SECONDS} s (busy, never idle)"
            loop, main_task = state.loop, state.main
            if loop is not None and main_task is not None:
                try:
                    loop.call_soon_threadsafe(main_task.cancel)
                except RuntimeError:
                    pass
            thread.join(1.0)
            if thread.is_alive():
                state.hang += "; the thread could not be stopped and is left running"
        elif state.stalled:
            waited = time.monotonic() - started
            state.hang = f"hung: after {waited:.2f} s the loop had nothing left to run"
    finally:
        for logger in loggers:
            logger.removeHandler(capture)
    state.logs = capture.texts
    return state


def _unfinished(run: Run) -> list[str]:
    return sorted(f"{id} ({kind})" for id, kind in run.started.items() if id not in run.outcomes)


def _waiting(run: Run) -> str:
    unfinished = _unfinished(run)
    if unfinished:
        return f"handlers waiting forever: {unfinished}"
    return f"every handler ended (the root with {run.outcomes.get('r')}), but batchy.run did not"


def check_example(tree: Any, specs: list[Spec]) -> None:
    """The four properties of the module docstring, for one generated tree."""
    root = Node(("par", False, [tree]), "r")
    run = Run(specs)
    state = run_bounded(lambda: run.build(root))
    unfinished = _unfinished(run)
    if state.hang is not None:
        fail(f"{state.hang}; {_waiting(run)}", run, state)
    if state.error is not None:
        fail(f"batchy.run raised {state.error!r} (expected it to return)", run, state)
    if state.logs:
        fail("logged from an event-loop callback", run, state)
    if unfinished:
        fail(f"handlers that started and never ended: {unfinished}", run, state)
    if run.twice:
        fail(f"handlers that ended twice: {run.twice}", run, state)
    kind, result = state.outcome
    got = ("value", norm(result)) if kind == "value" else ("error", label(result))
    if got != run.outcomes["r"]:
        fail(f"batchy.run gave {got}, the root handler ended {run.outcomes['r']}", run, state)
    check_against_model(root, run)


def fail(message: str, run: Run, state: types.SimpleNamespace) -> None:
    """Fail the example with ``message``, what was logged and what the killers did."""
    lines = [message]
    if state.logs:
        lines += ["logged from an event-loop callback:", *(f"  {t}" for t in state.logs[:5])]
    if run.kills:
        lines.append(f"cancellations: {run.kills}")
    raise AssertionError("\n".join(lines))


# -- strategies -------------------------------------------------------------------------


def specs_strategy(behaviours: tuple[str, ...]) -> st.SearchStrategy[list[Spec]]:
    def spec(behaviour: st.SearchStrategy[str]) -> st.SearchStrategy[Spec]:
        # max_concurrency=1 with chunks of 2: a plain function's chunks past the
        # first were never sent (a hang) until chunks were started in a loop.
        return st.tuples(
            behaviour,
            st.booleans(),
            st.booleans(),
            st.sampled_from([None, 2]),
            st.sampled_from([None, 1]),
        )

    first = spec(st.sampled_from(WELL_BEHAVED))  # gives the fallback values
    rest = st.lists(
        spec(st.sampled_from(behaviours)), min_size=N_LOADERS - 1, max_size=N_LOADERS - 1
    )
    return st.tuples(first, rest).map(lambda fr: [fr[0], *fr[1]])


def _catch_nodes(children: Any) -> Any:
    return st.tuples(st.just("catch"), st.booleans(), st.sampled_from(["exc", "base"]), children)


def _cancel_nodes(children: Any) -> Any:
    # The target is a handler, so that cancelling it has waits to interrupt; the
    # victim is one of the tasks of its subtree (an index, modulo their number).
    target = st.one_of(handler_nodes(children), _catch_nodes(children))
    return st.tuples(st.just("cancel"), st.booleans(), st.integers(0, 3), st.integers(0, 7), target)


UNHASHABLE_LEAVES = st.tuples(
    st.just("unhashable"),
    st.booleans(),
    st.integers(0, N_LOADERS - 1),
    st.sampled_from(["list", "dict"]),
)
CYCLE_LEAVES = st.one_of(
    st.tuples(st.just("cycle1"), st.booleans(), st.booleans()),
    st.tuples(
        st.just("cycle2"), st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans()
    ),
)


def chaos_trees(*, unhashable: bool = False, cycles: bool = False, cancel: bool = False) -> Any:
    leaves = [load_leaves(N_LOADERS)]
    if unhashable:
        leaves.append(UNHASHABLE_LEAVES)
    if cycles:
        leaves.append(CYCLE_LEAVES)
    extra = [_catch_nodes] + ([_cancel_nodes] if cancel else [])
    return handler_trees(st.one_of(*leaves), extra_nodes=extra, max_leaves=15)


@pytest.fixture
def chaos(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Run ``check`` over ``max_examples`` generated examples (x20 with --chaos-long).

    ``pinned`` examples run first, every time: cases that broke an engine once.
    """
    long = request.config.getoption("--chaos-long")

    def run(
        check: Callable[..., None],
        max_examples: int,
        pinned: tuple[dict[str, Any], ...] = (),
        **strategies: Any,
    ) -> None:
        test = given(**strategies)(
            settings(
                max_examples=max_examples * 20 if long else max_examples,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )(check)
        )
        for case in reversed(pinned):
            test = example(**case)(test)
        test()

    return run


def sync_ok(*others: Spec) -> list[Spec]:
    """Loader specs: well-behaved plain loaders, then ``others`` in place of the last ones."""
    plain: Spec = ("ok", False, False, None)
    return [plain] * (N_LOADERS - len(others)) + list(others)


# -- the properties ---------------------------------------------------------------------


def chaos_loader_errors(tree: Any, specs: list[Spec]) -> None:
    check_example(tree, specs)


def test_loaders_that_raise_or_break_the_contract(chaos: Callable[..., None]) -> None:
    behaviours = WELL_BEHAVED + CONTRACT_BREAKING
    pinned = (
        # Three keys of a plain loader in chunks of 2, one chunk at a time: the
        # second chunk was never sent (found by --chaos-long).
        {
            "tree": (
                "par",
                False,
                [("load", 3, 2), ("par", False, [("load", 3, 0), ("load", 3, 1)])],
            ),
            "specs": sync_ok(("ok", False, False, 2, 1)),
        },
        # A wrong length, with a key whose repr raises in the error message.
        {"tree": ("load", 3, 4), "specs": sync_ok(("long", False, False, None))},
        {"tree": ("load", 3, 4), "specs": sync_ok(("long", True, True, 2))},
        {"tree": ("load", 3, 2), "specs": sync_ok(("wrong-type", False, False, None))},
        {
            "tree": ("catch", False, "exc", ("load", 3, 4)),
            "specs": sync_ok(("raise", True, True, 2)),
        },
        {
            "tree": ("par", True, [("load", 3, 5), ("load", 3, 6)]),
            "specs": sync_ok(("map", True, True, 2)),
        },
    )
    chaos(chaos_loader_errors, 40, pinned, tree=chaos_trees(), specs=specs_strategy(behaviours))


def chaos_base_exceptions(tree: Any, specs: list[Spec]) -> None:
    check_example(tree, specs)


def test_loaders_that_raise_base_exceptions(chaos: Callable[..., None]) -> None:
    behaviours = (*WELL_BEHAVED, "raise", *BASE_RAISES)
    pinned = (
        {"tree": ("load", 3, 0), "specs": sync_ok(("raise-base", False, False, None))},
        {"tree": ("load", 3, 0), "specs": sync_ok(("raise-base", True, False, None))},
        {
            "tree": ("catch", True, "base", ("par", False, [("load", 2, 1), ("load", 3, 1)])),
            "specs": sync_ok(
                ("raise-genexit", False, True, None), ("raise-cancelled", True, True, 2)
            ),
        },
        {
            "tree": ("catch", False, "exc", ("seq", True, [("load", 3, 1), ("load", 0, 1)])),
            "specs": sync_ok(("raise-cancelled", False, False, None)),
        },
    )
    specs = specs_strategy(behaviours)
    chaos(chaos_base_exceptions, 40, pinned, tree=chaos_trees(), specs=specs)


def chaos_unhashable_keys(tree: Any, specs: list[Spec]) -> None:
    check_example(tree, specs)


def test_unhashable_keys(chaos: Callable[..., None]) -> None:
    tree = chaos_trees(unhashable=True)
    pinned = (
        {"tree": ("unhashable", False, 0, "list"), "specs": sync_ok()},
        {
            "tree": (
                "seq",
                False,
                [("unhashable", False, 0, "list"), ("unhashable", True, 1, "dict")],
            ),
            "specs": [("ok", False, True, None), *sync_ok()[1:]],
        },
    )
    chaos(chaos_unhashable_keys, 40, pinned, tree=tree, specs=specs_strategy(WELL_BEHAVED))


def chaos_cycles(tree: Any, specs: list[Spec]) -> None:
    check_example(tree, specs)


def test_cycles(chaos: Callable[..., None]) -> None:
    pinned = (
        {"tree": ("cycle1", False, False), "specs": sync_ok()},
        {"tree": ("cycle1", True, True), "specs": sync_ok()},
        {"tree": ("cycle2", False, True, False, False, False), "specs": sync_ok()},
        {"tree": ("cycle2", True, False, True, False, True), "specs": sync_ok()},
    )
    tree = chaos_trees(cycles=True)
    chaos(chaos_cycles, 40, pinned, tree=tree, specs=specs_strategy(WELL_BEHAVED))


def chaos_cancellation(tree: Any, specs: list[Spec]) -> None:
    check_example(tree, specs)


def test_cancellation(chaos: Callable[..., None]) -> None:
    specs = specs_strategy((*WELL_BEHAVED, "raise"))
    pinned = (
        # The victim waits on a task whose key resolves in the round the killer wakes.
        {
            "tree": ("cancel", False, 1, 0, ("seq", False, [("seq", False, [("load", 0, 1)])])),
            "specs": sync_ok(),
        },
        {
            "tree": ("cancel", False, 1, 0, ("seq", False, [("seq", True, [("load", 0, 1)])])),
            "specs": sync_ok(),
        },
    )
    chaos(chaos_cancellation, 40, pinned, tree=chaos_trees(cancel=True), specs=specs)


def chaos_everything(tree: Any, specs: list[Spec]) -> None:
    check_example(tree, specs)


def test_everything_at_once(chaos: Callable[..., None]) -> None:
    behaviours = (*WELL_BEHAVED, *CONTRACT_BREAKING, *BASE_RAISES)
    tree = chaos_trees(unhashable=True, cycles=True, cancel=True)
    chaos(chaos_everything, 80, tree=tree, specs=specs_strategy(behaviours))


# -- KeyboardInterrupt and SystemExit leave batchy.run ----------------------------------


def chaos_interrupts(tree: Any, specs: list[Spec], interrupt: Any) -> None:
    """A loader raising KeyboardInterrupt / SystemExit: batchy.run raises it, if it is reached."""
    kind, is_async = interrupt
    error = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[kind]
    root = Node(("par", False, [tree]), "r")
    run = Run(specs)

    def raising(keys: list[Any]) -> Any:
        raise error()

    async def araising(keys: list[Any]) -> Any:
        await asyncio.sleep(0)
        raise error()

    # The last loader is replaced by one that interrupts.
    run.loaders[-1] = batchy.batched(araising if is_async else raising, name="interrupt")
    model = Model(specs, {})
    reached = _reaches(root, model, N_LOADERS - 1)
    state = run_bounded(lambda: run.build(root))
    if state.hang is not None:
        fail(f"{state.hang}; {_waiting(run)}", run, state)
    if state.logs:
        fail("logged from an event-loop callback", run, state)
    if reached and not isinstance(state.error, error):
        fail(f"a loader raised {kind}; batchy.run ended with {state.error!r}", run, state)
    if not reached and state.error is not None:
        fail(f"batchy.run raised {state.error!r}", run, state)
    if not reached and _unfinished(run):
        fail(f"handlers that started and never ended: {_unfinished(run)}", run, state)


def _reaches(node: Node, model: Model, loader: int) -> bool:
    """Whether a sequential evaluation asks ``loader`` for a key (its keys treated as failing)."""
    spec = model.specs[loader]
    model.specs = [*model.specs[:loader], ("raise", *spec[1:]), *model.specs[loader + 1 :]]
    asked = []
    leaf = model.leaf

    def spy(i: int, k: int) -> Outcome:
        if i == loader:
            asked.append(k)
        return leaf(i, k)

    model.leaf = spy  # type: ignore[method-assign]
    model.eval(node)
    return bool(asked)


def test_keyboard_interrupt_and_system_exit_leave_batchy_run(chaos: Callable[..., None]) -> None:
    pinned = tuple(
        {
            "tree": ("seq", False, [("load", 3, 4)]),
            "specs": sync_ok(),
            "interrupt": (kind, is_async),
        }
        for kind in ("KeyboardInterrupt", "SystemExit")
        for is_async in (False, True)
    )
    chaos(
        chaos_interrupts,
        20,
        pinned,
        tree=handler_trees(load_leaves(N_LOADERS), max_leaves=15),
        specs=specs_strategy(WELL_BEHAVED),
        interrupt=st.tuples(st.sampled_from(["KeyboardInterrupt", "SystemExit"]), st.booleans()),
    )
