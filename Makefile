# Quickstart targets. Both create .venv on a fresh machine and install what they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: test demo install clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

# torch first, pinned to the CPU build, so no other requirement can pull a CUDA one.
$(STAMP): setup.py | $(PY)
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[test]"
	@$(PY) -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ or not torch.cuda.is_available() else 1)" \
	  || (echo "error: a non-CPU torch was installed" && exit 1)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m launch.demo --workdir=runs/demo

clean-venv:
	rm -rf $(VENV)
