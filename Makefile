# mtsql: `make test` and `make reproduce` are all the set-up a fresh machine needs.
# Each one creates or refreshes the virtualenv (.venv) when pyproject.toml or constraints/ changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROFILE ?= configs/profiles/tiny.yaml
PYTEST_ARGS ?=
# CUDA machines get the CUDA torch that the engines pin; every other machine the CPU wheel (docs/dependencies.md).
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
ifeq ($(HAS_GPU),1)
  CONSTRAINTS := -c constraints/common.txt
  EXTRAS := dev,gpu
else
  CONSTRAINTS := -c constraints/common.txt -c constraints/cpu.txt
  EXTRAS := dev
endif

.PHONY: setup test test-fast test-all reproduce lint clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml constraints/common.txt constraints/cpu.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	$(BIN)/python tools/fix_cpu_torch.py
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not model and not data" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

reproduce: $(STAMP)
	$(BIN)/mtsql run pipelines/reproduce.yaml --config $(PROFILE)
	@echo "Paper profiles (GPU nodes): $(BIN)/mtsql run pipelines/paper.yaml --config configs/profiles/paper-qwen3-4b.yaml"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools

clean-venv:
	rm -rf $(VENV)
