"""Run every benchmark suite (or the ones named) in one process and print their tables."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main(argv: list[str]) -> None:
    names = argv or sorted(
        m.name for m in pkgutil.iter_modules(benchmarks.__path__) if not m.name.startswith("_")
    )
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        module.main()


if __name__ == "__main__":
    main(sys.argv[1:])
