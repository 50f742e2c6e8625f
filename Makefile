# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run dev test test-cluster bench bench-http bench-smoke lint format docs

# What running needs (requirements.txt); the tests, lint and benchmarks add requirements-dev.txt.
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev-installed: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(VENV)/.docs-installed: $(VENV)/.installed requirements-docs.txt
	$(PY) -m pip install --quiet -r requirements-docs.txt
	touch $@

# granian (project/serving.py; WEB_CONCURRENCY workers) after migrate and collectstatic, plus a
# Celery worker and beat, and a private redis-server when nothing answers at REDIS_URL.
run: $(VENV)/.installed
	$(PY) -m project.run

# The same with Django's development server (autoreload, DEBUG on) in place of granian.
dev: $(VENV)/.installed
	$(PY) -m project.run --dev

# Two pytest-xdist workers, each with its own private Redis, a test file at a time (a module's fixtures,
# such as the wheel tests/test_install.py builds, run once): the long tests mostly wait on the
# processes they start. PYTEST_ARGS=-n0 runs the suite in one process.
XDIST := -n 2 --dist loadfile

test: $(VENV)/.dev-installed
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The same suite against a private 3-master Redis Cluster (Celery's broker on a standalone server beside it).
test-cluster: $(VENV)/.dev-installed
	$(PY) -m pytest --redis-cluster $(XDIST) $(PYTEST_ARGS)

bench: $(VENV)/.dev-installed
	$(PY) -m bench.last_seen

# Needs Debian's wrk (apt-get install wrk).
bench-http: $(VENV)/.dev-installed
	$(PY) -m bench.http

# Every bench at its smoke size (bench/smoke.py), results into a temporary directory: fails if one fails.
bench-smoke: $(VENV)/.dev-installed
	$(PY) -m bench.smoke

# ruff, then import-linter's contracts (pyproject.toml's [tool.importlinter]: the floors of activity/).
lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(VENV)/.dev-installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or page
# (not with --quiet: mkdocs 1.6 then hides the warnings and passes).
docs: $(VENV)/.docs-installed
	$(PY) -m mkdocs build --strict
