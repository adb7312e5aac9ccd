"""An integration imported without its extra names the extra to install (it was a bare 'No module named')."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import batchy_contrib

ROOT = Path(batchy_contrib.__file__).parent

CASES = [
    ("batchy_contrib.observe.prometheus", "prometheus_client", "'batchy[prometheus]'"),
    ("batchy_contrib.observe.otel", "opentelemetry", "'batchy[otel]'"),
    ("batchy_contrib.dashboard", "starlette", "'batchy[dashboard]'"),
    ("batchy_contrib.dashboard", "jinja2", "'batchy[dashboard]'"),
    ("batchy_contrib.dashboard.serve", "uvicorn", "'batchy[dashboard]'"),
    ("batchy_contrib.graphql", "graphql", "'batchy[graphql]'"),
    ("batchy_contrib.graphql.strawberry", "strawberry", "strawberry-graphql"),
    ("batchy_contrib.web.fastapi", "fastapi", "'batchy[fastapi]'"),
    ("batchy_contrib.web.flask", "flask", "'batchy[flask]'"),
    ("batchy_contrib.web.django", "asgiref", "'batchy[django]'"),
    ("batchy_contrib.web.django", "django", "'batchy[django]'"),
    ("batchy_contrib.jobs.redis", "redis", "'batchy[redis]'"),
    ("batchy_contrib.jobs.postgres", "psycopg_pool", "'batchy[postgres]'"),
    ("batchy_contrib.sql.postgres", "psycopg", "'batchy[postgres]'"),
    ("batchy_contrib.sql.mysql", "aiomysql", "'batchy[mysql]'"),
    ("batchy_contrib.cache.memcache", "pymemcache", "'batchy[memcache]'"),
]

# Imports the module with the package missing (None in sys.modules is how Python
# spells "not installed" for one import); a process of its own, so no test sees
# the half-imported modules this leaves.
PROBE = """
import sys
sys.modules[{package!r}] = None
try:
    import {module}
except ModuleNotFoundError as error:
    print(type(error).__module__, type(error).__name__, error.name, isinstance(error, __import__("batchy").UsageError))
    print(error)
"""


@pytest.mark.parametrize(("module", "package", "install"), CASES)
def test_a_missing_package_names_the_extra(module: str, package: str, install: str) -> None:
    probe = PROBE.format(package=package, module=module)
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.splitlines() == [
        f"batchy_contrib MissingExtraError {package} True",
        f"{module} needs the package {package!r}, which is not installed here; "
        f"install it with: pip install {install}",
    ]


def test_the_dashboard_command_says_what_to_install() -> None:
    # It wrapped the message in its own: "needs the dashboard's packages (... install
    # it with: ...); install them with: ..." said the fix twice.
    probe = (
        "import sys; sys.modules['starlette'] = None\n"
        "from batchy.__main__ import main\n"
        "sys.exit(main(['dashboard', 'app:queue']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "batchy: error: `batchy dashboard`: batchy_contrib.dashboard needs the package "
        "'starlette', which is not installed here; install it with: pip install 'batchy[dashboard]'"
    )


def test_every_public_integration_guards_its_packages() -> None:
    # A new integration (or a new package in one) cannot forget the guard: every
    # module-level third-party import of a public module sits inside `with extra(...)`
    # naming its package, there or in its package's __init__.
    guarded: dict[Path, set[str]] = {}
    bare: list[tuple[Path, str]] = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        tree = ast.parse(path.read_text())
        names = guarded.setdefault(path, set())
        for node in tree.body:
            if isinstance(node, ast.With):
                call = node.items[0].context_expr
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "extra":
                    names.update(a.value for a in call.args[2:] if isinstance(a, ast.Constant))
            elif isinstance(node, ast.Import | ast.ImportFrom) and not any(
                p.startswith("_") and p != "__init__.py" for p in parts
            ):
                tops = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if node.level == 0
                    else []
                )
                for top in (t.partition(".")[0] for t in tops):
                    if top and top not in sys.stdlib_module_names and top != "batchy":
                        if top != "batchy_contrib":
                            bare.append((path, top))
    missing = [
        (str(path.relative_to(ROOT)), top)
        for path, top in bare
        if top not in guarded[path] and top not in guarded.get(path.parent / "__init__.py", set())
    ]
    assert missing == []
    assert guarded[ROOT / "observe" / "prometheus.py"] == {"prometheus_client"}


def test_a_file_that_hides_an_installed_package_is_named_not_reported_missing(
    tmp_path: Path,
) -> None:
    # A redis.py of one's own hid the installed redis: the message said redis was
    # not installed, and the pip install it gave changed nothing.
    (tmp_path / "redis.py").write_text("x = 1\n")
    probe = PROBE.format(package="not_a_package", module="batchy_contrib.jobs.redis")
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,  # first on sys.path, as a script's own folder is
        env={**os.environ, "PYTHONPATH": str(ROOT.parent)},  # this checkout's batchy
    ).stdout
    assert out.splitlines() == [
        "batchy_contrib MissingExtraError redis.asyncio True",
        f"batchy_contrib.jobs.redis needs the module 'redis.asyncio', which 'redis' at "
        f"{tmp_path / 'redis.py'} does not have: a file or folder of your own named redis "
        "may hide the installed package (rename it), or the package may be too old "
        "(pip install -U 'batchy[redis]')",
    ]
