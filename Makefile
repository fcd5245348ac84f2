PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test demo admin lint bench bench-distributed migrate up lock docs

# A deployment installs requirements.lock only; development and CI add the test lock. Every
# lock pins every package with its hashes, and pip refuses a file whose hash is not listed.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check --require-hashes

$(STAMP): requirements-pip.lock requirements.lock requirements-test.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements-pip.lock
	$(PIP_INSTALL) -r requirements.lock -r requirements-test.lock
	touch $(STAMP)

# The API client generator runs in a venv of its own (requirements-codegen.in says why);
# the generated-client test uses it.
CODEGEN_VENV := .venv-codegen
CODEGEN_STAMP := $(CODEGEN_VENV)/.installed

$(CODEGEN_STAMP): requirements-pip.lock requirements-codegen.lock
	test -x $(CODEGEN_VENV)/bin/python || $(PYTHON) -m venv $(CODEGEN_VENV)
	$(CODEGEN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		--require-hashes -r requirements-pip.lock
	$(CODEGEN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		--require-hashes -r requirements-codegen.lock
	touch $(CODEGEN_STAMP)

# The documentation site's toolchain has a venv of its own too (requirements-docs.in), which
# only `make docs` installs; it lives under var/, which git and the source-walking tests skip.
DOCS_VENV := var/docs-venv
DOCS_STAMP := $(DOCS_VENV)/.installed

$(DOCS_STAMP): requirements-pip.lock requirements-docs.lock
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		--require-hashes -r requirements-pip.lock
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		--require-hashes -r requirements-docs.lock
	touch $(DOCS_STAMP)

setup: $(STAMP) $(CODEGEN_STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

# Two pytest-xdist workers: each has its own test database, cache and broker keys, and the
# tests that share a server beyond those run in order on one worker (tests/conftest.py).
TEST_WORKERS ?= 2

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

demo: migrate
	$(PY) manage.py demo

# The admin on the data `make demo` left (same database): a staff login scoped to the demo
# organisation, its password printed once (ADMIN_ARGS=--reset prints a new one), then the
# development server on 127.0.0.1:$(WEB_PORT). Without the demo's data it says so and stops.
admin: setup
	$(PY) manage.py demo_admin --port $(WEB_PORT) $(ADMIN_ARGS)

# The distributed stack (deploy/Procfile.dev) against real servers; `make demo` is embedded.
UP_NEEDS := DATABASE_URL CELERY_BROKER_URL REDIS_URL MQTT_URL
# An empty database gets the demo organisation, an operator login (printed once), farms, one
# device per simulated serial and their rules; the URLs are printed before the processes start.
WEB_PORT ?= 8000
FLOWER_PORT ?= 5555
UP_FARMS ?= 2
UP_DEVICES ?= 10
# Every process writes its counters here and /metrics sums them; emptied at each start, as
# prometheus_client's multiprocess mode requires.
UP_METRICS_DIR := $(CURDIR)/var/metrics

up: setup
	@missing=""; for v in $(UP_NEEDS); do \
		[ -n "$$(printenv $$v)" ] || missing="$$missing $$v"; done; \
	if [ -n "$$missing" ]; then \
		echo "make up runs against real servers; set:$$missing (or use 'make demo')" >&2; \
		exit 2; fi
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py sync_beat_schedule
	$(PY) manage.py provision_demo --if-empty --farms $(UP_FARMS) --devices $(UP_DEVICES) \
		--web-url http://127.0.0.1:$(WEB_PORT) --flower-url http://127.0.0.1:$(FLOWER_PORT)/
	rm -rf "$(UP_METRICS_DIR)" && mkdir -p "$(UP_METRICS_DIR)"
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PROMETHEUS_MULTIPROC_DIR="$(UP_METRICS_DIR)" \
		WEB_PORT=$(WEB_PORT) FLOWER_PORT=$(FLOWER_PORT) UP_DEVICES=$(UP_DEVICES) \
		$(VENV)/bin/honcho -f deploy/Procfile.dev start

# The deployed processes (bridge, one worker per stage, beat) measured against real servers:
# command latency per step of offered crossings, ingest and scheduler next to bare baselines.
# BENCH_ARGS="--farms 50 --steps 10,30 --step-seconds 10" for a shorter run.
bench-distributed: setup
	@missing=""; for v in $(UP_NEEDS); do \
		[ -n "$$(printenv $$v)" ] || missing="$$missing $$v"; done; \
	if [ -n "$$missing" ]; then \
		echo "make bench-distributed runs against real servers; set:$$missing" >&2; \
		exit 2; fi
	$(PY) manage.py bench --distributed $(BENCH_ARGS)

# Ingest, command latency and scheduler figures next to bare baselines, at base and 10× sizes
# (the scheduler part prints why it is skipped on SQLite). BENCH_ARGS="--quick" for a smoke run.
bench: migrate
	$(PY) manage.py bench $(BENCH_ARGS)

# The site built from docs/ into site/ (ignored by git), strictly: a broken link or anchor, a
# link out of docs/, or a page missing from the nav in mkdocs.yml fails the build. The theme's
# end-of-life banner is silenced (requirements-docs.in notes it).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --clean

lint: setup
	$(PIP_INSTALL) -r requirements.lock -r requirements-test.lock -r requirements-lint.lock
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy common devices scheduler automation alarms events notifications reminders rollouts config devtools

# The three locks from pyproject.toml (dependencies, then the extras test and lint), hashed,
# each layered on the ones before it so that they install together. A pin already in a lock is
# kept while it fits; LOCK_ARGS="--upgrade-package NAME" moves one. uv runs from a throwaway
# venv, never from .venv. The codegen and docs locks come from their own .in files.
UV_VERSION := 0.13.9
LOCK = "$$tools/bin/uv" pip compile pyproject.toml --quiet --universal --generate-hashes \
	--custom-compile-command "make lock" $(LOCK_ARGS)
NO_EMIT = $$(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/--no-emit-package \1/p' $(1))

lock:
	tools=$$(mktemp -d) && trap 'rm -rf "$$tools"' EXIT && \
	$(PYTHON) -m venv "$$tools" && \
	"$$tools/bin/pip" install --quiet --disable-pip-version-check uv==$(UV_VERSION) && \
	$(LOCK) -o requirements.lock && \
	$(LOCK) --extra test -c requirements.lock $(call NO_EMIT,requirements.lock) \
		-o requirements-test.lock && \
	$(LOCK) --extra test --extra lint -c requirements.lock -c requirements-test.lock \
		$(call NO_EMIT,requirements.lock requirements-test.lock) -o requirements-lint.lock && \
	"$$tools/bin/uv" pip compile requirements-codegen.in --quiet --universal --generate-hashes \
		--custom-compile-command "make lock" $(LOCK_ARGS) -o requirements-codegen.lock && \
	"$$tools/bin/uv" pip compile requirements-docs.in --quiet --universal --generate-hashes \
		--custom-compile-command "make lock" $(LOCK_ARGS) -o requirements-docs.lock
