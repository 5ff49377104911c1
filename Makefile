# Gym Ledger. `make demo` and `make test` each set everything up first (scripts/setup.sh,
# idempotent: seconds when nothing changed).
.PHONY: setup demo test test-python test-contracts contracts lint clean

VENV := .venv
FORGE := node_modules/@foundry-rs/forge-linux-amd64/bin/forge
# pytest workers: three on the CI machine's two cores. A serial run keeps one core busy (98% of
# one in tests/ledger); with two workers the cores still idle while a test waits on a server,
# a chain or a subprocess, and a third worker fills that time (the full suite: 1,649 s of
# pytest on two workers, 1,554 s on three with the cores 99% busy). Each worker computes on one
# thread (tests/conftest.py), and tests/conftest.py schedules each test file on one worker, the
# longest first.
PYTEST_WORKERS ?= 3

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
