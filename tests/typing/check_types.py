"""Checked by mypy --strict in `make typecheck`: loaders and tasks carry their types to users."""

from __future__ import annotations

from collections.abc import Generator
from typing import assert_type

import batchy


class User:
    name: str = ""


@batchy.batched
async def users_by_id(ids: list[int]) -> list[User]:
    return [User() for _ in ids]


@batchy.batched(max_batch_size=10)
def names_by_id(ids: list[int]) -> dict[int, str]:
    return {i: str(i) for i in ids}


async def _emails(ids: list[int]) -> dict[int, str]:
    return {}


emails_by_id = batchy.batched(_emails, name="emails", max_batch_size=100)


@batchy.task
async def user_name(uid: int) -> str:
    user = await users_by_id(uid)
    assert_type(user, User)
    return user.name


@batchy.task
def greeting(uid: int) -> Generator[object, object, str]:
    name = yield names_by_id(uid)
    return f"hello {name}"


async def main() -> None:
    assert_type(users_by_id, batchy.Loader[int, User])
    assert_type(names_by_id, batchy.Loader[int, str])
    assert_type(emails_by_id, batchy.Loader[int, str])
    assert_type(await names_by_id(1), str)
    assert_type(await users_by_id.many([1, 2]), list[User])
    assert_type(user_name(1), batchy.Task[str])
    assert_type(await user_name(1), str)
    assert_type(batchy.run(user_name(1)), str)
    assert_type(greeting(1), batchy.Task[str])
