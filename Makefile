# Two commands do all set-up: `make demo` and `make test` (see README).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Python 3.12: on PATH, or from pyenv where the shim alone does not select it.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; assert sys.version_info[:2]==(3,12)' 2>/dev/null; then echo $$p; break; fi; done)
export MUJOCO_GL ?= egl

.PHONY: demo test test-e2e test-all docs setup clean

$(STAMP): pyproject.toml setup.py
	@if [ -z "$(PYTHON312)" ]; then echo "error: Python 3.12 not found (install it, e.g. pyenv install 3.12)"; exit 1; fi
	@test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/robo-async train

# every test but the long end-to-end ones (marked `e2e`): under 10 minutes on 2 cores, set-up included
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15 -m "not e2e" tests

# the long end-to-end tests: whole training runs killed, hung, restarted, resumed, on Ray, on the twin
test-e2e: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15 -m e2e tests

# both (what CI runs: .ci/run)
test-all: test test-e2e

# the docs site (docs/, mkdocs.yml), built offline with warnings as errors into site/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d site

clean:
	rm -rf $(VENV) runs
