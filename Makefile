# The two commands of the README. Both create ./.venv and install into it.
PYTHON ?= python3
VENV ?= .venv
PIP := $(VENV)/bin/pip

.PHONY: demo test

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

demo: $(VENV)/bin/python
	$(PIP) install -q -e '.[all]'
	$(VENV)/bin/goodput demo

# The tests run in a random order (pytest-randomly); the seed is printed first.
# Repeat an order: make test SEED=<the printed seed>.
test: $(VENV)/bin/python
	$(PIP) install -q -e '.[all,test]'
	@seed="$(SEED)"; seed="$${seed:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"; \
	echo "test order: --randomly-seed=$$seed (repeat: make test SEED=$$seed)"; \
	$(VENV)/bin/python -m pytest -q -p randomly --randomly-seed="$$seed"
