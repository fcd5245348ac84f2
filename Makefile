PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test demo lint bench migrate

$(STAMP): requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(PY) manage.py migrate --noinput

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

demo: migrate
	$(PY) manage.py demo

bench: migrate
	$(PY) manage.py bench_ingest

lint: setup
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-lint.lock
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy devices automation events notifications reminders config
