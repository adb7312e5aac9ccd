"""Shared fixtures: real servers (MariaDB, Redis, memcached); under CI=true a missing one fails."""

from __future__ import annotations

import os
import socket

import pytest

SERVERS = {
    "mariadb": ("127.0.0.1", 3306),
    "redis": ("127.0.0.1", 6379),
    "memcached": ("127.0.0.1", 11211),
}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_server(name: str) -> tuple[str, int]:
    """Return (host, port) of a test server; fail under CI=true, skip (visibly) otherwise."""
    host, port = SERVERS[name]
    if not _reachable(host, port):
        message = f"{name} is not reachable on {host}:{port}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{message}; CI needs every server (run `make services`)")
        pytest.skip(message)
    return host, port


@pytest.fixture
def mariadb() -> tuple[str, int]:
    return require_server("mariadb")


@pytest.fixture
def redis_server() -> tuple[str, int]:
    return require_server("redis")


@pytest.fixture
def memcached() -> tuple[str, int]:
    return require_server("memcached")
