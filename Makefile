# meanfield: `make demo` runs the main job, `make test` runs the tests.
# Both create .venv with the machine's python3.11 (or python3) and install what they need.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ORACLE_STAMP := $(VENV)/.installed-oracle

.PHONY: demo test bench clean install docs

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/meanfield warm --jobs 2  # compile the numba kernels into the cache once, the engine's in a second process (README, "First use")
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/meanfield mixture demo --out runs/demo
	@echo ""
	@echo "figures: runs/demo/*/  summary: runs/demo/summary.md"
	@echo "to type the README's meanfield commands as written, activate the environment first:"
	@echo "    source .venv/bin/activate"

# the explicit torch networks that the two-layer, embedding and disentangled tests hold the engine
# against (float64, autograd; they share no code with the kernels). torch 2.13.0 is the CPU build
# that lies on this project's machines' disk (no download); where it cannot be installed the
# tests that need it are skipped, and .ci/run refuses to pass without it.
$(ORACLE_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q 'torch==2.13.0' || echo "meanfield: torch not installed: the explicit torch network tests are skipped"
	touch $(ORACLE_STAMP)

test: $(STAMP) $(ORACLE_STAMP)
	$(BIN)/lint-imports  # the layers and the papers' independence (setup.cfg [importlinter])
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)  # PYTEST_ARGS: .ci/run moves a few files to a second process

# the documentation site (mkdocs.yml) into site/: --strict turns every warning
# (a broken link or anchor, a missing page, an API reference that does not resolve) into a failure
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,docs,analysis]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# every figure of issue 27 in one run, with ratios against the peers (the optional bench extra, jax and torch:
# $(BIN)/pip install -e '.[bench]'; a missing one is reported as skipped) -> benchmarks/results/latest.md;
# the single studies: benchmarks/bench_*.py
bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info runs/demo site
