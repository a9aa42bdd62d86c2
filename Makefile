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

test: $(VENV)/bin/python
	$(PIP) install -q -e '.[all,test]'
	$(VENV)/bin/python -m pytest -q
