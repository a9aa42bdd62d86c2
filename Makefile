# The commands of the README. `demo` and `test` create ./.venv and install into it;
# `test-torch` (CI runs it after `test`) adds torch, Lightning and transformers to
# ./.venv and runs the PyTorch adapter's tests;
# `test-maxtext` (opt-in, not part of `test`) builds its own Python 3.12 environment
# under build/ and runs real MaxText on CPU (tests/external/maxtext_e2e.py);
# `test-axlearn AXLEARN_SRC=<apple/axlearn checkout>` (opt-in too) runs our AXLearn
# recorder through AXLearn's own registry and config system (tests/external/axlearn_e2e.py).
PYTHON ?= python3
VENV ?= .venv
PIP := $(VENV)/bin/pip

.PHONY: demo test test-torch test-maxtext test-axlearn test-slurm slurm-server system-packages build-tools

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

demo: $(VENV)/bin/python
	$(PIP) install -q -e '.[all]'
	$(VENV)/bin/goodput demo

# The tests run in a random order (pytest-randomly); the seed is printed first.
# Repeat an order: make test SEED=<the printed seed>. Without the Debian packages
# (and their tests): make test SYSTEM_PACKAGES=0.
# The compiled loop calls (setup.py) must be built and are tested (REQUIRE_NATIVE=1);
# without a C compiler: make test REQUIRE_NATIVE=0 (their tests skip).
REQUIRE_NATIVE ?= 1
export REQUIRE_NATIVE
test: $(VENV)/bin/python system-packages build-tools
	$(PIP) install -q -e '.[all,test]'
	@seed="$(SEED)"; seed="$${seed:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"; \
	echo "test order: --randomly-seed=$$seed (repeat: make test SEED=$$seed)"; \
	SYSTEM_PACKAGES=$(SYSTEM_PACKAGES) $(VENV)/bin/python -m pytest -q -p randomly \
	  --randomly-seed="$$seed" --ignore=tests/integrations/torch

# The PyTorch adapter's tests (real torch, torchrun, Lightning, the Hugging Face
# Trainer on CPU), run by CI after `make test`. torch is pinned first so that
# pip takes the CPU build where the index has one (an unpinned torch from PyPI is
# the CUDA build, several GB); Lightning and transformers then resolve to it.
TORCH_VERSION ?= 2.13.0
test-torch: $(VENV)/bin/python build-tools
	$(PIP) install -q -e '.[test]' 'torch==$(TORCH_VERSION)'
	$(PIP) install -q -e '.[test,torch-trainers]' 'torch==$(TORCH_VERSION)'
	@seed="$(SEED)"; seed="$${seed:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"; \
	echo "test order: --randomly-seed=$$seed (repeat: make test-torch SEED=$$seed)"; \
	$(VENV)/bin/python -m pytest -q -p randomly --randomly-seed="$$seed" tests/integrations/torch

test-maxtext:
	$(PYTHON) tests/external/maxtext_e2e.py

test-axlearn:
	@[ -n "$(AXLEARN_SRC)" ] || { echo "usage: make test-axlearn AXLEARN_SRC=<axlearn checkout>"; exit 2; }
	$(PYTHON) tests/external/axlearn_e2e.py --axlearn-src "$(AXLEARN_SRC)"

# The Debian packages the tests run for real, on loopback: postgresql (throwaway
# servers for the PostgreSQL store's tests), pgbouncer (transaction pooling in front
# of one), chromium and chromium-driver (the dashboard's browser tests), prometheus
# and its promtool (real scrapes, the alert rules). None starts a daemon the tests
# depend on. As root, the missing ones are installed with apt-get, said first (about
# 150 packages with their dependencies on Debian 12); otherwise their tests skip.
# SYSTEM_PACKAGES=0 installs none and skips those tests, saying why
# (tests/support/system_packages.py reads the same variable). .ci/run sets it to 1.
SYSTEM_PACKAGES ?= 1
# The end of a recipe that found the Debian packages in $$missing: as root it installs
# them, saying so with $(1); apt-get failing says $(2); not root, names them and says $(3).
install_missing = [ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "make: installing Debian packages:$$missing ($(1))"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || \
	    echo "note: apt-get failed; $(2)"; \
	else \
	  echo "note: not installed:$$missing $(3)"; \
	fi
system-packages:
ifeq ($(SYSTEM_PACKAGES),0)
	@echo "SYSTEM_PACKAGES=0: no Debian package installed; the tests needing postgresql, pgbouncer, chromium or prometheus are skipped"
else
	@missing=""; \
	{ ls /usr/lib/postgresql/*/bin/initdb || command -v initdb; } >/dev/null 2>&1 || missing="$$missing postgresql"; \
	{ command -v pgbouncer || ls /usr/sbin/pgbouncer; } >/dev/null 2>&1 || missing="$$missing pgbouncer"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	{ command -v prometheus && command -v promtool; } >/dev/null || missing="$$missing prometheus"; \
	$(call install_missing,about 150 packages with their dependencies; make test SYSTEM_PACKAGES=0 skips them and their tests,the tests needing$$missing will be skipped,(make test installs them as root); their tests will be skipped)
endif

# What builds the compiled loop calls (goodput_core/record/_native.c): a C compiler
# and the interpreter's headers (Debian's python3 keeps them in python3-dev). As
# root, installed with apt-get where missing (not with SYSTEM_PACKAGES=0); otherwise said.
build-tools:
	@missing=""; \
	{ command -v cc || command -v gcc; } >/dev/null 2>&1 || missing="$$missing gcc"; \
	$(PYTHON) -c "import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
	  || missing="$$missing python3-dev"; \
	$(if $(filter 0,$(SYSTEM_PACKAGES)),[ -z "$$missing" ] || echo "note: not installed:$$missing (SYSTEM_PACKAGES=0); without them the package installs without its compiled part: make test REQUIRE_NATIVE=0",$(call install_missing,to build the compiled loop calls,the package installs without its compiled part,(make test installs them as root); without them the package installs without its compiled part: make test REQUIRE_NATIVE=0))

# Opt-in: a real Slurm (slurmctld, slurmd, slurmdbd on a private MariaDB, all on
# this machine, as root) records, requeues and accounts a run; the report's
# scheduling time is checked against sacct (tests/external/slurm_e2e.py).
# SLURM_FIXTURE=path also saves sacct's JSON (the CI fixture of test_schedulers).
test-slurm: $(VENV)/bin/python slurm-server
	$(PIP) install -q -e '.[test]'
	$(VENV)/bin/python tests/external/slurm_e2e.py $(if $(SLURM_FIXTURE),--record-fixture $(SLURM_FIXTURE))

slurm-server:
	@command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q slurm-wlm slurmdbd mariadb-server munge; }
