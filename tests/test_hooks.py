"""Instrumentation hooks and the batchy.testing N+1 guard."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import batchy
from batchy import _hooks
from batchy.testing import record


@batchy.batched
def users(ids: list[int]) -> list[str]:
    return [f"u{i}" for i in ids]


@batchy.batched
def posts(ids: list[int]) -> list[dict[str, int]]:
    return [{"id": i, "user": i % 3} for i in ids]


@batchy.task
def post_with_user(pid: int) -> Any:
    post = yield posts(pid)
    user = yield users(post["user"])
    return user


def test_hook_sees_rounds_and_batches() -> None:
    class Collect(batchy.Hook):
        def __init__(self) -> None:
            self.events: list[Any] = []

        def round_started(self, event: batchy.RoundEvent) -> None:
            self.events.append(("round", event.number, event.loaders, event.keys))

        def batch_flushed(self, event: batchy.BatchEvent) -> None:
            self.events.append(("batch", event.loader, event.keys, event.round, event.error))
            assert event.duration >= 0

    hook = Collect()
    with batchy.hooked(hook):
        batchy.run(batchy.gather(*(post_with_user(p) for p in range(4))))
    batchy.run(post_with_user(1))  # after removal: not seen
    assert hook.events == [
        ("round", 1, ("posts",), 4),
        ("batch", "posts", (0, 1, 2, 3), 1, None),
        ("round", 2, ("users",), 3),
        ("batch", "users", (0, 1, 2), 2, None),
    ]


def test_a_failing_hook_is_logged_and_does_not_break_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(batchy.Hook):
        def round_started(self, event: batchy.RoundEvent) -> None:
            raise RuntimeError("exporter down")

    with caplog.at_level(logging.ERROR, logger="batchy"), batchy.hooked(Broken()):
        assert batchy.run(post_with_user(1)) == "u1"
    assert "failed in round_started" in caplog.text


def test_recorder_counts_calls_and_rounds() -> None:
    with record() as rec:
        batchy.run(batchy.gather(*(post_with_user(p) for p in range(6))))
    assert rec.rounds == 2
    assert rec.calls(posts) == [[0, 1, 2, 3, 4, 5]]
    assert rec.calls("users") == [[0, 1, 2]]
    assert rec.call_counts() == {"posts": 1, "users": 1}
    rec.assert_max(rounds=2, calls={users: 1, "posts": 1})


def test_n_plus_one_guard_reports_what_happened() -> None:
    @batchy.task
    def one_by_one() -> Any:
        for p in range(2):
            yield post_with_user(p)  # sequential: an N+1 in disguise

    with record() as rec:
        batchy.run(one_by_one())
    with pytest.raises(AssertionError) as info:
        rec.assert_max(rounds=2, calls={users: 1})
    assert str(info.value) == (
        "batching regressed: 4 rounds, expected at most 2; 2 calls to users, expected at most 1\n"
        "  round 1: posts(1 keys)\n"
        "  round 2: users(1 keys)\n"
        "  round 3: posts(1 keys)\n"
        "  round 4: users(1 keys)"
    )


def test_scope_events_reach_every_hook_that_hears_them() -> None:
    """Scopes call only the hooks that do something with scope events: a Hook whose
    class leaves both methods as Hook's no-ops is skipped (it is told of batches);
    an override, a method set on the object, or a hook not made from Hook is called."""
    heard: list[str] = []

    class Batches(batchy.Hook):
        def batch_flushed(self, event: batchy.BatchEvent) -> None:
            heard.append(f"batch {event.loader}")

    class Exits(batchy.Hook):
        def scope_exited(self, scope: Any) -> None:
            heard.append(f"exited {scope.name}")

    class Plain:  # no Hook base: any object with the methods
        def scope_entered(self, scope: Any) -> None:
            heard.append(f"plain entered {scope.name}")

        def scope_exited(self, scope: Any) -> None:
            heard.append(f"plain exited {scope.name}")

    own = batchy.Hook()
    own.scope_entered = lambda scope: heard.append(f"own entered {scope.name}")  # type: ignore[method-assign]
    batches, exits, plain = Batches(), Exits(), Plain()
    with batchy.hooked(batches), batchy.hooked(exits), batchy.hooked(own):
        with batchy.hooked(plain):  # type: ignore[arg-type]
            assert list(_hooks.scoped) == [exits, own, plain]
            with batchy.scope("s"):
                pass
        assert list(_hooks.scoped) == [exits, own]
        batchy.run(users(1))  # in a scope of its own (no name)
    assert _hooks.hooks == _hooks.scoped == ()
    assert heard == [
        "own entered s",
        "plain entered s",
        "exited s",
        "plain exited s",
        "own entered None",
        "batch users",
        "exited None",
    ]


def test_a_hook_needs_only_the_methods_it_uses(caplog: pytest.LogCaptureFixture) -> None:
    """Any object with some of Hook's methods is a hook: the events it has no method
    for pass it by, with nothing logged (each was an AttributeError traceback)."""
    flushed: list[str] = []

    class OnlyBatches:  # no Hook base, no round, scope or failure methods
        def batch_flushed(self, event: batchy.BatchEvent) -> None:
            flushed.append(event.loader)

    @batchy.task
    def fails() -> Any:
        yield users(1)
        raise ValueError("boom")

    hook = OnlyBatches()
    with caplog.at_level(logging.DEBUG, logger="batchy"), batchy.hooked(hook):  # type: ignore[arg-type]
        assert _hooks.scoped == ()
        with batchy.scope("s"):
            batchy.run(users(1))
        with pytest.raises(ValueError, match="boom"):
            batchy.run(fails())
    assert flushed == ["users", "users"]
    assert caplog.records == []
