# One-command entry points. Everything runs inside .venv with the locked versions.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export RAY_USAGE_STATS_ENABLED := 0

# The Prefect server `make server` starts; `make deploy` and `make worker` talk to it.
PREFECT_PORT ?= 4200
PREFECT_API_URL ?= http://127.0.0.1:$(PREFECT_PORT)/api
WORK_POOL := crawlflow

.PHONY: install demo test test-fast lint typecheck docs wheel-check clean server deploy worker

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/crawlflow demo

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -n 2 --dist loadfile
	$(MAKE) docs

# The unit tests only: no Ray, no Prefect, no servers (tests marked `integration` are left out).
test-fast: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -m "not integration"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The packages, as [tool.mypy] in pyproject.toml configures it (tests and bench/ are left out).
typecheck: install
	$(BIN)/mypy

# The user documentation (docs/, mkdocs.yml) as a static site in site/; a broken link fails it.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The wheel, installed with its dependencies into a fresh virtual environment, runs the example
# of docs/python-api.md (.ci/wheel-check; CI runs it after `make test`).
wheel-check:
	PYTHON=$(PYTHON) .ci/wheel-check

server: install
	$(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

deploy: install
	PREFECT_API_URL=$(PREFECT_API_URL) $(BIN)/prefect work-pool inspect $(WORK_POOL) >/dev/null 2>&1 \
	  || PREFECT_API_URL=$(PREFECT_API_URL) $(BIN)/prefect work-pool create $(WORK_POOL) --type process
	PREFECT_API_URL=$(PREFECT_API_URL) CRAWLFLOW_HOME=$(CURDIR) $(BIN)/prefect --no-prompt deploy --all

worker: install
	PREFECT_API_URL=$(PREFECT_API_URL) $(BIN)/prefect worker start --pool $(WORK_POOL)

clean:
	rm -rf $(VENV) crawl-out .pytest_cache
