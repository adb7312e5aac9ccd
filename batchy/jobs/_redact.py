"""Passwords out of store locations (URLs and libpq ``key=value`` strings) before they are shown."""

from __future__ import annotations

import re

__all__ = ["password_of", "redact"]

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # a URL opens with its scheme


def _userinfo(rest: str) -> tuple[str, str, int] | None:
    """``(user, password, where the host's @ is)`` of ``user:password@host/...``, if any.

    Read off the raw text, not urlsplit's parts: libpq and redis-py take a password
    holding ``?`` or ``#``, where urlsplit ends the host. The password runs to the
    last ``@`` before the path.
    """
    first = rest.find("@")
    if first < 0:
        return None
    slash = rest.find("/", first)
    at = rest.rfind("@", 0, slash if slash >= 0 else len(rest))
    user, colon, password = rest[:at].partition(":")
    return (user, password, at) if colon else None


def redact(location: str) -> str:
    """``location`` (a URL or a libpq ``key=value`` string) with any password masked."""
    if _URL.match(location):
        scheme, _, rest = location.partition("://")
        found = _userinfo(rest)
        if found is not None:
            user, _, at = found
            rest = f"{user}:***{rest[at:]}"
        rest = re.sub(r"(?i)([?&]password=)[^&]*", r"\1***", rest)
        return f"{scheme}://{rest}"
    # A value is quoted, or runs to a blank that no backslash escapes (libpq's rule).
    return re.sub(r"(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:\\.|[^\s\\])+)", r"\1***", location)


def password_of(location: str) -> str | None:
    """The password in ``location``'s user info (``user:password@host``), scheme or not."""
    found = _userinfo(location.partition("://")[2] if _URL.match(location) else location)
    return found[1] if found is not None and found[1] else None
