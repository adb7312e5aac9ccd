"""The public surface: exported names, and the layering of the package, by walking imports."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import batchy

ROOT = Path(__file__).resolve().parent.parent

# The engine's private modules, bottom to top: each may import only those before it.
ENGINE_LAYERS = [
    "_errors",
    "_hooks",
    "_stats",
    "_scheduler",
    "_scope",
    "_future",
    "_watch",
    "_gather",
    "_task",
    "_taskfn",
    "_batch",
    "_loader",
    "_run",
]


def test_exported_names_are_exactly_the_public_api() -> None:
    assert set(batchy.__all__) >= {
        "BatchEvent",
        "BatchyError",
        "Future",
        "Hook",
        "Loader",
        "LoaderError",
        "MissingKeyError",
        "RoundEvent",
        "Scope",
        "ScopeStats",
        "Task",
        "TaskFunction",
        "UsageError",
        "YieldError",
        "add_hook",
        "batched",
        "current_scope",
        "gather",
        "hooked",
        "remove_hook",
        "resolved",
        "run",
        "scope",
        "task",
    }
    public = {n for n in dir(batchy) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(batchy, n)) is type(sys)}
    assert public - modules == set(batchy.__all__)


def test_errors_share_one_base() -> None:
    for name in ("LoaderError", "MissingKeyError", "UsageError", "YieldError"):
        assert issubclass(getattr(batchy, name), batchy.BatchyError)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((0, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append((child.level, child.module or ""))
                if child.level == 1 and not child.module:
                    found.extend((1, a.name) for a in child.names)
            visit(child)

    visit(tree)
    return found


def test_engine_imports_only_the_standard_library_and_lower_layers() -> None:
    stdlib = sys.stdlib_module_names
    for index, name in enumerate(ENGINE_LAYERS):
        for level, module in _imports(ROOT / "batchy" / f"{name}.py"):
            if level == 0:
                top = module.split(".")[0]
                assert top in stdlib or top == "__future__", f"{name} imports {module}"
            elif module:
                assert module in ENGINE_LAYERS[:index], f"{name} imports .{module} (a higher layer)"


def _absolute(path: Path, level: int, module: str) -> str:
    if level == 0:
        return module
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, module] if module else base)


def test_everything_above_the_engine_uses_only_its_public_api() -> None:
    engine = {ROOT / "batchy" / f"{name}.py" for name in ENGINE_LAYERS}
    engine.add(ROOT / "batchy" / "__init__.py")
    above = [p for p in (ROOT / "batchy").rglob("*.py") if p not in engine]
    above += list((ROOT / "batchy_contrib").rglob("*.py"))
    assert ROOT / "batchy" / "testing.py" in above
    for path in above:
        for level, module in _imports(path):
            full = _absolute(path, level, module)
            if path in RE_EXPORTED:
                continue  # checked name by name below
            assert not full.startswith("batchy._"), (
                f"{path.relative_to(ROOT)} imports the private engine module {full}; "
                "use the public batchy namespace (add what is missing there)"
            )


# Modules the package face re-exports cannot import ``batchy`` itself (that would
# be an import cycle), so they take the engine's public names from the modules
# that define them: public names only, all the same.
RE_EXPORTED = {ROOT / "batchy" / "dataloader.py"}


def test_modules_the_package_re_exports_use_only_public_names() -> None:
    for path in RE_EXPORTED:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or node.module == "batchy"):
                for alias in node.names:
                    assert alias.name in batchy.__all__, (
                        f"{path.relative_to(ROOT)} imports {alias.name} from "
                        f"{'.' * node.level}{node.module}, which batchy does not export"
                    )


def test_every_module_opens_with_a_docstring() -> None:
    for path in list((ROOT / "batchy").rglob("*.py")) + list(
        (ROOT / "batchy_contrib").rglob("*.py")
    ):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc, f"{path.relative_to(ROOT)} has no module docstring saying what it owns"
