# Two set-up commands for a fresh machine (each creates .venv and installs what it needs):
#   make demo   runs a worker on a SQLite file with example tasks and schedules, and serves
#               the dashboard on http://127.0.0.1:$(DEMO_PORT)/ (loopback only)
#   make test   runs ruff, mypy and the whole test suite (PostgreSQL/Redis suites skip
#               with one line saying how to enable them when those servers are absent)
# Also: make docs (the documentation site, strict), make package-smoke (build, install, run),
# make soak (the whole-system soak; SOAK_ARGS="--store postgres --seed 7 --duration 600").
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck pytest pythons docs docs-serve package-smoke bench soak chaos clean

# mysqlclient (Django's MySQL driver, tests/test_django.py) builds against MariaDB's or MySQL's
# client headers: installed where pkg-config finds them, else its tests skip saying so (CI
# installs the headers first: .ci/run).
$(STAMP): pyproject.toml rota/_version.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	if pkg-config --exists mariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null; then \
	  $(BIN)/python -m pip install --quiet -e ".[mysqlclient]"; fi
	touch $(STAMP)

DEMO_PORT ?= 8000
demo: $(STAMP)
	$(BIN)/rota demo --port $(DEMO_PORT)

lint: $(STAMP)
	$(BIN)/ruff check rota tests bench tools
	$(BIN)/ruff format --check rota tests bench tools

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite runs on PYTEST_WORKERS processes (pytest-xdist; each test has its own schema, files
# and ports), then the tests marked `alone` (they restart a shared server) on one process.
# Pick tests with PYTEST_ARGS (paths, -k, -x) and markers with PYTEST_MARK (never -m in
# PYTEST_ARGS: it would replace the split). Exit code 5 (no test picked) of one step is fine
# when the other step ran tests.
PYTEST_WORKERS ?= 2
PYTEST_MARK ?=
_mark = $(if $(PYTEST_MARK), and ($(PYTEST_MARK)))
pytest: $(STAMP)
	rc1=0; rc2=0; \
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not alone$(_mark)" $(PYTEST_ARGS) || rc1=$$?; \
	[ $$rc1 -eq 0 ] || [ $$rc1 -eq 5 ] || exit $$rc1; \
	$(BIN)/python -m pytest -p no:xdist -m "alone$(_mark)" $(PYTEST_ARGS) || rc2=$$?; \
	[ $$rc2 -eq 0 ] || [ $$rc2 -eq 5 ] || exit $$rc2; \
	[ $$rc1 -eq 0 ] || [ $$rc2 -eq 0 ] || { echo "make pytest: no test picked" >&2; exit 5; }

test: lint typecheck pytest

# A chosen part of the suite on the other supported Pythons (PYTHON_VERSIONS="3.12 3.13"), each
# in a venv of its own (.venv-py3.X), made by .ci/pythons (which .ci/run calls).
pythons:
	bash .ci/pythons

# The documentation site (MkDocs + Material, mkdocs.yml): --strict, so a broken link, a missing
# snippet or a missing API reference fails the build (.ci/run runs it).
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[dev,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean
	$(BIN)/python tools/check_offline.py site

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Build the sdist and wheel, install the wheel into a fresh venv and run it (.ci/package-smoke).
package-smoke: $(STAMP)
	PYTHON=$(BIN)/python bash .ci/package-smoke

BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml bench/requirements.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e ".[postgres,mysql,redis]" -r bench/requirements.txt
	touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m bench $(BENCH_ARGS)

SOAK_ARGS ?= --store sqlite --duration 300
soak: $(STAMP)
	$(BIN)/python -m tools.soak $(SOAK_ARGS)

# The chaos matrix of issue 45 (bench/chaos): needs root, the postgres user, PgBouncer.
CHAOS_ARGS ?=
chaos: $(STAMP)
	$(BIN)/python -m bench.chaos $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) $(BENCH_VENV) .venv-py3.* .mypy_cache .pytest_cache .ruff_cache site dist
