# DART-FL: set-up, demo, lint and tests. `make demo` and `make test` are all a user needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# System packages the demo and the full suite need (Debian names).
APT_PACKAGES ?= iproute2 util-linux mosquitto openssl dataset-fashion-mnist chromium systemd
# What `make test-arm64` emulates a Raspberry Pi with (Debian names).
ARM64_APT_PACKAGES ?= qemu-user-static binfmt-support debootstrap
PYTEST_ARGS ?=

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1

.PHONY: help venv system-deps demo lint test test-fast test-arm64 pi-install bench wheel clean distclean

help:
	@echo "make demo       set up, then simulate DART vs baselines on a bursty workload (out/demo-sim.png)"
	@echo "make test       set up, lint, then the full test suite in a loopback-only network namespace"
	@echo "make test-fast  fast tests only (no slow, no integration), no lint"
	@echo "make lint       ruff check, ruff format --check, mypy"
	@echo "make test-arm64 the device side on an emulated Raspberry Pi 4 and 5 (root; ~10 min cold)"
	@echo "make pi-install on a Raspberry Pi: Debian packages, .venv, DART-FL's edge and fl extras"
	@echo "make wheel      build dist/dartfl-VERSION-py3-none-any.whl (pip install 'dist/...whl[edge,fl]')"
	@echo "make venv | system-deps | bench | clean | distclean"

venv: $(STAMP)

$(BIN)/python:
	scripts/make-venv $(PYTHON) $(VENV)

# Re-install only when pyproject.toml or the install script changed since the last install.
$(STAMP): pyproject.toml scripts/pip-install | $(BIN)/python
	scripts/pip-install $(BIN)/python dev,edge,fl,dashboard
	touch $@

system-deps:
	scripts/system-deps $(APT_PACKAGES)

demo: venv system-deps
	mkdir -p out
	@# The headline: a Flower simulation (Ray, hence the loopback-only namespace) of 6 clients,
	@# DART vs inference-first; table on stdout, plots out/fl-*.png, records in out/runs.sqlite.
	scripts/loopback-run $(BIN)/dartfl fl sim --clients 6 --rounds 12 --policy dart \
	    --policy inference-first --seed 1 --store out/runs.sqlite --plot-dir out
	$(BIN)/dartfl sim --workload pareto-onoff --duration-s 600 --target-load 0.5 \
	    --profile pi4 --slo-ms 250 --policy dart --policy inference-only --policy inference-first:4 \
	    --policy inference-first:8 --policy static:0.5 --policy clairvoyant --seed 1 --plot out/demo-sim.png

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: system-deps lint
	scripts/loopback-run $(BIN)/python -m pytest $(PYTEST_ARGS)

# An arm64 Debian under qemu-user, Cortex-A72 (Pi 4) and Cortex-A76 (Pi 5): scripts/test-arm64.
test-arm64: venv
	scripts/system-deps $(ARM64_APT_PACKAGES) iproute2 util-linux
	scripts/test-arm64

# The device side on a Raspberry Pi (or any Debian box), into $(VENV): scripts/pi-install.
pi-install:
	scripts/pi-install $(VENV)

test-fast: venv
	$(BIN)/python -m pytest -m "not slow and not integration" $(PYTEST_ARGS)

bench: venv system-deps
	@if [ -f benchmarks/run_all.py ]; then \
	    scripts/loopback-run $(BIN)/python benchmarks/run_all.py; \
	else \
	    echo "no benchmarks yet (benchmarks/run_all.py is missing)"; \
	fi

# The installable package; tests/wheel_fixtures.py builds it the same way and installs it
# outside the checkout. No build isolation: setuptools comes from the venv, nothing from the index.
wheel: venv
	$(BIN)/python -m pip wheel --no-deps --no-build-isolation -w dist .

clean:
	rm -rf build dist out test-artifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -type d -name '*.egg-info' -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
