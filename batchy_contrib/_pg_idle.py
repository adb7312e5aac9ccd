"""Whether the server ended an idle PostgreSQL connection: one look at its socket, no round trip."""

from __future__ import annotations

import select
from typing import Any

import psycopg

__all__ = ["server_ended"]


def server_ended(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> bool:
    """True if the server ended ``conn`` (or may have) while it was idle here.

    A server restart, a failover or ``idle_session_timeout`` ends every idle
    connection at once; each would fail the call that took it next, with no
    way to tell then whether its statement ran (so it is not sent again). The
    server says goodbye as it ends one, and says nothing else to a session that
    sent nothing and does not LISTEN (ask only of such connections), so a socket
    with something to read is a connection to drop: one ``poll`` that does not wait.
    """
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:  # closed
        return True
    if hasattr(select, "poll"):  # no limit on the descriptor's number, as select() has
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except ValueError:  # a descriptor select() cannot watch: no way to tell
        return False
