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

.PHONY: demo test test-torch test-maxtext test-axlearn test-slurm slurm-server postgres-server pgbouncer-server browser-and-prometheus

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

demo: $(VENV)/bin/python
	$(PIP) install -q -e '.[all]'
	$(VENV)/bin/goodput demo

# The tests run in a random order (pytest-randomly); the seed is printed first.
# Repeat an order: make test SEED=<the printed seed>.
test: $(VENV)/bin/python postgres-server pgbouncer-server browser-and-prometheus
	$(PIP) install -q -e '.[all,test]'
	@seed="$(SEED)"; seed="$${seed:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"; \
	echo "test order: --randomly-seed=$$seed (repeat: make test SEED=$$seed)"; \
	$(VENV)/bin/python -m pytest -q -p randomly --randomly-seed="$$seed" \
	  --ignore=tests/integrations/torch

# The PyTorch adapter's tests (real torch, torchrun, Lightning, the Hugging Face
# Trainer on CPU), run by CI after `make test`. torch is pinned first so that
# pip takes the CPU build where the index has one (an unpinned torch from PyPI is
# the CUDA build, several GB); Lightning and transformers then resolve to it.
TORCH_VERSION ?= 2.13.0
test-torch: $(VENV)/bin/python
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

# The PostgreSQL store's tests start throwaway servers from Debian's package
# (no daemon is started here). Installed when missing and we may (root).
postgres-server:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q postgresql; } || \
	  echo "note: PostgreSQL is not installed; its store's tests will be skipped"

# The PostgreSQL store's pgbouncer test (transaction pooling in front of a
# throwaway server) runs Debian's pgbouncer itself; installed when missing and
# we may (root). Debian's package starts no daemon the test depends on.
pgbouncer-server:
	@command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q pgbouncer; } || \
	  echo "note: pgbouncer is not installed; its PostgreSQL test will be skipped"

# The dashboard's browser tests drive Debian's headless chromium with its
# chromium-driver; the dashboard tests start Debian's prometheus (and run its
# promtool) on loopback. Installed when missing and we may (root).
browser-and-prometheus:
	@{ command -v chromium && command -v chromedriver && command -v prometheus && \
	   command -v promtool; } >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q chromium chromium-driver prometheus; } || \
	  echo "note: chromium, chromium-driver or prometheus is not installed; the dashboard's browser and Prometheus tests will be skipped"

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
