# Gym Ledger. `make demo` and `make test` each set everything up first (scripts/setup.sh,
# idempotent: seconds when nothing changed).
.PHONY: setup demo test test-python test-contracts contracts lint clean

VENV := .venv
FORGE := node_modules/@foundry-rs/forge-linux-amd64/bin/forge
# pytest workers: a serial run keeps one core busy (98% of one in tests/ledger), so two workers
# use both cores of the CI machine (tests/conftest.py schedules each test file on one worker,
# the longest first).
PYTEST_WORKERS ?= 2

setup:
	@scripts/setup.sh

demo: setup
	$(VENV)/bin/gym demo

test: setup test-contracts test-python

test-contracts:
	cd contracts && ../$(FORGE) test

test-python:
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadgroup

contracts:
	$(VENV)/bin/gym contracts build

lint:
	$(VENV)/bin/ruff check .

clean:
	rm -rf contracts/out contracts/cache $(VENV) node_modules
