"""The data-source modules use only batchy's public API (no ``batchy._private`` imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import batchy_contrib

# Every module, so a new one cannot be forgotten here.
ROOT = Path(batchy_contrib.__file__).parent
MODULES = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py"))


def test_every_family_is_walked() -> None:
    assert {"sql/mysql.py", "cache/memcache.py", "graphql/_plan.py", "jobs/redis.py"} <= set(
        MODULES
    )
    assert {"web/asgi.py", "errors.py", "observe/otel.py", "observe/prometheus.py"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_only_the_public_engine_api(name: str) -> None:
    path = ROOT / name
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            assert not node.module.startswith("batchy._"), f"{name}: from {node.module} import"
            if node.module == "batchy":
                assert all(not a.name.startswith("_") for a in node.names)
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("batchy._"), f"{name}: import {alias.name}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "batchy":
                assert not node.attr.startswith("_"), f"{name}: batchy.{node.attr}"
