# The two commands of the README: `make run` (main job) and `make test` (test suite).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
OUT     ?= out

# Python writes bytecode in every recipe, whatever the image sets (this one sets
# PYTHONDONTWRITEBYTECODE=1): the installs below compile none (--no-compile, as uv does), so the
# first process to import a module writes its bytecode and later ones read it. Without this, every
# pytest process — the two workers and the sessions the tests start — would also rewrite the
# asserts of every module of the pytest plugins' distributions (the harness's, hypothesis') again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml requirements/ci.txt
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -c requirements/ci.txt torch
	$(BIN)/pip install -q --no-compile -c requirements/ci.txt -e '.[dev,hf]'
	touch $(STAMP)

install: $(STAMP)

# Main job: quick suite, default built-in implementation, CUDA when present else CPU.
run: $(STAMP)
	$(BIN)/harness run --impl torch --cases quick --device auto --out $(OUT)

# --dist worksteal (pytest-xdist 3.2 and later; requirements/ci.txt pins 3.8.0): a worker out of
# tests takes half of the other's queue, so a long subprocess test does not leave one idle at the end.
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist worksteal

clean:
	rm -rf $(VENV) $(OUT)
