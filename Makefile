# Quickstart targets. Both create .venv on a fresh clone and install only what they need:
#   make demo   the core plus the demo's extras (plots, tensorboard, parquet: the analysis
#               of its two models), then runs the demo
#   make test   the core plus every extra (libtpu too: the suite compiles for a TPU slice,
#               tests/launch/test_compile.py), pytest and the CPU build of torch (and, apart,
#               transformers 4.57 for one export test), then the suite
# A stamp per install: `make demo` then `make test` adds the test packages; `make test`
# then `make demo` installs nothing more (the test install covers the demo's).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
# torch's CPU build: the "+cpu" local version is only on PyTorch's CPU index.
# Offline with the wheel in pip's find-links: make test TORCH_INDEX=
TORCH       := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PYTEST_ARGS ?=
# transformers 4.x beside the venv's 5.x, for the test that exports must read alike in
# both (tests/models/test_hf_config_readers.py); never on the venv's path
COMPAT4        := $(VENV)/compat/transformers4
TRANSFORMERS4  := transformers==4.57.1 huggingface_hub==0.36.0 tokenizers==0.22.1

.PHONY: test demo install clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip setuptools wheel

$(DEMO_STAMP): setup.py Makefile | $(PY)
	$(PIP) -e ".[plots,tensorboard,parquet]"
	touch $@

# torch first, alone (--no-deps: only torch is looked up on the CPU index, so an
# unreachable index costs one lookup, not one per dependency); `.[test]` then adds
# its dependencies and the rest. The guard fails for any torch that is not "+cpu".
$(TEST_STAMP): setup.py Makefile | $(PY)
	$(PIP) --no-deps $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "$(TORCH)"
	$(PIP) -e ".[test,tpu]"
	$(PIP) --no-deps --upgrade --target $(COMPAT4) $(TRANSFORMERS4)
	@$(PY) -c "import sys, torch; v = torch.__version__; \
	  sys.exit(0 if '+cpu' in v else f'error: torch {v} is not the CPU build (+cpu)')"
	touch $@ $(DEMO_STAMP)

install: $(TEST_STAMP)

test: $(TEST_STAMP)
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

demo: $(DEMO_STAMP)
	$(PY) -m launch.demo --workdir=runs/demo

clean-venv:
	rm -rf $(VENV)
