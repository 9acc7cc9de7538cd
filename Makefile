# Everything CI checks, in one command: make check
PY ?= .venv/bin/python

.PHONY: check lint format typecheck test screenshots bench

check: lint typecheck test

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

typecheck:
	$(PY) -m mypy

test:
	$(PY) -m pytest -q -n 2

screenshots:
	$(PY) scripts/screenshots.py

bench:
	$(PY) -m bench.claims
