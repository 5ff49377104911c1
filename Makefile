# Gym Ledger. `make demo` and `make test` each set everything up first (scripts/setup.sh,
# idempotent: seconds when nothing changed).
.PHONY: setup demo test test-python test-contracts contracts lint clean

VENV := .venv
FORGE := node_modules/@foundry-rs/forge-linux-amd64/bin/forge

setup:
	@scripts/setup.sh

demo: setup
	$(VENV)/bin/gym demo

test: setup test-contracts test-python

test-contracts:
	cd contracts && ../$(FORGE) test

test-python:
	$(VENV)/bin/pytest

contracts:
	$(VENV)/bin/gym contracts build

lint:
	$(VENV)/bin/ruff check .

clean:
	rm -rf contracts/out contracts/cache $(VENV) node_modules
