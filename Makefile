# Everything a fresh Debian 12 or 13 machine (root) needs, installed idempotently.
#   make up    - set up, bring up the local cluster and run a sample job
#   make test  - set up, then lint, type-check and run the test suite CI runs (<= 40 min)
#   make test-all - the same and the long live sequences (README, "The tests")
#   make aws-rehearsal - the AWS path on this machine, without an AWS account (docs/rehearsal.md)
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# podman & co: the local cluster, and the judge containers in which the node image's own
# slurmctld, munged, Lmod, promtool and amtool check what slurmforge renders (the host
# needs none of them); chromium: the pool page test; gcc, libc6-dev: the AWS rehearsal's
# machines get their instance type's memory from a shim built here (tests/harness/rehearsal/memory.py)
APT_PACKAGES := python3 python3-venv git openssh-client podman runc debootstrap uidmap iptables chromium shellcheck \
	gcc libc6-dev
SPEC ?= examples/local.yaml

.PHONY: help setup apt venv up down test test-all unit lint typecheck bench aws-rehearsal

help:
	@echo "make up    - bring up the local cluster ($(SPEC)) and run a sample job"
	@echo "make down  - remove the local cluster (the image cache stays)"
	@echo "make test  - lint, type-check and the tests CI runs: unit, Pulumi, Slurm, package, the live cluster's core, the AWS rehearsal's quick mode"
	@echo "make test-all - the same and the long live sequences (repeated faults, long benches' quick modes)"
	@echo "make unit  - the fast tests only"
	@echo "make bench - the benchmarks in bench/"
	@echo "make aws-rehearsal - the AWS path on this machine: moto, IMDS and podman machines (docs/rehearsal.md)"

setup: apt venv

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip >/dev/null
	$(PY) -m pip install -q -e '.[deploy,aws,dev,report]'
	@rm -f $(VENV)/.installed-*; touch $@

up: setup
	$(VENV)/bin/slurmforge up --local $(SPEC) --yes

down: venv
	$(VENV)/bin/slurmforge down --local --yes

lint: venv
	$(VENV)/bin/ruff check slurmforge tests stacks bench

typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(VENV)/bin/pytest -m "unit or pulumi" -q

# lint and types; the fast tests with the AWS rehearsal's quick mode side by side (it reuses
# the image it baked when the build's inputs are unchanged); then the real local cluster (it
# builds or reuses the node image); each phase timed, a table of the times at the end
# (tests/phases.sh)
test: setup
	VENV=$(VENV) tests/phases.sh core

test-all: setup
	VENV=$(VENV) tests/phases.sh all

# the whole rehearsal, the golden image baked again (docs/rehearsal.md)
aws-rehearsal: setup
	$(PY) bench/rehearsal_bench.py

bench: venv
	$(PY) bench/render_bench.py
	$(PY) bench/validate_bench.py
	$(PY) bench/local_bench.py
