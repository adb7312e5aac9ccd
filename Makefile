# Every target sets itself up: a fresh clone needs only `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench docs lint typecheck pytest examples services clean crash-test test-graphql32 test-pythons screenshots

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "batchy needs Python 3.11+; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,docs,mysql,memcache,redis,graphql,bench,postgres,asgi,fastapi,flask,django,dashboard,otel,prometheus]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/blog.py
	$(BIN)/python examples/blog/render.py
	$(BIN)/python examples/jobs_demo.py

services:
	@bash scripts/ensure-services.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict batchy batchy_contrib tests/typing

pytest: $(STAMP) services
	$(BIN)/pytest -q

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@! grep -rl -e 'class="system-message"' -e 'class="problematic"' docs/_build/html || (echo 'error boxes in the rendered docs (above)'; exit 1)

examples: $(STAMP)
	$(BIN)/python examples/blog.py --quiet
	$(BIN)/python examples/jobs_demo.py --jobs 500 --quiet
	$(BIN)/python examples/sharded_orders.py --rows 20000 --quiet  # needs MariaDB

test: lint typecheck pytest docs examples test-graphql32 test-pythons

# The other Pythons batchy supports, each in a venv of its own with the newest
# releases of the extras (the main venv's are held back by benchmark peers: arq
# pins redis below 6): the whole suite on 3.13, the engine's tests on 3.12.
test-pythons: services
	bash scripts/test-pythons.sh 3.13 -- tests
	bash scripts/test-pythons.sh 3.12 -- tests/test_*.py tests/graphql

# The GraphQL integration again on graphql-core 3.2 (graphene's line); the main venv has 3.3.
test-graphql32: pyproject.toml
	test -x .venv-gql32/bin/pytest || $(PYTHON) -m venv .venv-gql32
	.venv-gql32/bin/pip install -q -e '.[dev,graphql32]'
	.venv-gql32/bin/pytest -q -p no:cacheprovider tests/graphql
	.venv-gql32/bin/pytest -q -p no:cacheprovider tests/integrations/test_recipes.py -k ariadne

bench: $(STAMP) services
	$(BIN)/python -m benchmarks

# The dashboard's pictures in the Operations guide, from its browser test (SQLite).
screenshots: $(STAMP) services
	BATCHY_SCREENSHOTS=docs/_static/dashboard $(BIN)/pytest -q tests/dashboard/test_browser.py -k sqlite

clean:
	rm -rf $(VENV) docs/_build .mypy_cache .ruff_cache .pytest_cache

# Kill -9 workers under load (Redis, SQLite, then PostgreSQL, whose LISTEN connections are
# also killed) and count lost, duplicated and out-of-order jobs.
crash-test: $(STAMP) services
	$(BIN)/python scripts/crash_test.py --store redis,sqlite,postgres
