"""Count the SELECTs the database runs for each request, in an ``X-SQL-Selects`` response header."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.db.backends.signals import connection_created

SELECTS = 0
_lock = threading.Lock()


def _count(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
    global SELECTS
    if sql.lstrip().upper().startswith("SELECT"):
        with _lock:
            SELECTS += 1
    return execute(sql, *args)


def _watch(sender: Any, connection: Any, **kwargs: Any) -> None:
    # Every connection, whichever thread opens it; once, though Django reconnects
    # the same connection object for each request.
    if _count not in connection.execute_wrappers:
        connection.execute_wrappers.append(_count)


connection_created.connect(_watch)


class CountSelects:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self._acall(request)
        before = SELECTS
        response = self.get_response(request)
        response["X-SQL-Selects"] = str(SELECTS - before)
        return response

    async def _acall(self, request: Any) -> Any:
        before = SELECTS
        response = await self.get_response(request)
        response["X-SQL-Selects"] = str(SELECTS - before)
        return response
