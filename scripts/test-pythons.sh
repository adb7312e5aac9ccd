#!/usr/bin/env bash
# The suite again on the other Pythons batchy supports (by default 3.12 and 3.13).
# The engine drives asyncio closely, and asyncio and sqlite3 change between
# releases: 3.13's asyncio turns a StopIteration set on a future into a
# RuntimeError, its json encoder nests deeper, 3.12 deprecated sqlite3's date
# adapters. Each Python is looked for as pythonX.Y on PATH, then among pyenv's
# versions; one that cannot be found fails under CI=true and is reported otherwise.
# Usage: scripts/test-pythons.sh 3.12 3.13 [-- pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ $# -gt 0 ] && shift
for v in "${versions[@]}"; do
  py=$(command -v "python$v" || true)
  # (A pyenv shim is on PATH for every version pyenv has, and fails for those not enabled.)
  if [ -z "$py" ] || ! "$py" -c 'import sys' >/dev/null 2>&1; then
    py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/python 2>/dev/null | sort -V | tail -1 || true)
  fi
  if [ -z "$py" ]; then
    msg="Python $v not found (no python$v on PATH, no pyenv version $v.x): install it (e.g. pyenv install $v)"
    if [ "${CI:-}" = true ]; then echo "$msg" >&2; exit 1; fi
    echo "not tested: $msg" >&2
    continue
  fi
  venv=".venv-py$v"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  if [ ! -e "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ]; then
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -e '.[dev,mysql,memcache,redis,graphql,postgres,asgi,fastapi,flask,django,dashboard,otel,prometheus]'
    # The strawberry integration's tests; not the bench extra, whose peers hold back redis-py.
    "$venv/bin/pip" install -q 'strawberry-graphql>=0.240'
    touch "$venv/.installed"
  fi
  echo "== Python $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])') ($py)"
  "$venv/bin/pytest" -q -p no:cacheprovider "$@"
done
