# ProcessBench build. Every target creates the virtualenv and installs the pinned set when missing.
#   make rebuild [SCALE=demo|release]   generate the sample corpora and materialize every asset through Dagster
#   make test                           ruff check, then the test suite
#   make test-fast                      ruff check, then the tests but the end-to-end builds (-m "not slow")
#   make lint                           ruff check . (the rules: pyproject.toml [tool.ruff])
#   make format                         ruff format . (not yet run over the tree)
#   make dev                            the Dagster UI on 127.0.0.1:$(PORT) (Ctrl-C, SIGTERM to it or to make stops it)
#   make check-regen                    rebuild the demo release and compare its checksums with tests/regen/demo.sha256
#   make regen-lock                     update that lock after a deliberate change (commit it with the change)
#   make bench [BENCH_UPSTREAM="--upstream gm100=PATH ..."]
#                                       frame-extraction, split and build benchmarks (cold build, rebuild with nothing
#                                       changed, rebuild after one template edit) and the eval runner's overhead per
#                                       item against a local server (numbers, not pass/fail)
#   make clean                          remove build outputs (keeps the virtualenv)

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
SCALE  ?= demo
PORT   ?= 3000
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export PYTHONHASHSEED := 0

.PHONY: venv rebuild test test-fast lint format dev check-regen regen-lock bench validate clean distclean

venv: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml

$(VENV)/.installed: pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

$(DAGSTER_HOME)/dagster.yaml:
	@mkdir -p $(DAGSTER_HOME)
	@printf 'telemetry:\n  enabled: false\n' > $@

rebuild: venv
	$(BIN)/processbench build --samples --scale $(SCALE)
	$(BIN)/processbench validate release

test: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: venv
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

lint: venv
	$(BIN)/ruff check .

format: venv
	$(BIN)/ruff format .

dev: venv
	$(BIN)/processbench dev --host 127.0.0.1 --port $(PORT)

check-regen: venv
	$(BIN)/python tests/regen.py check

regen-lock: venv
	$(BIN)/python tests/regen.py lock

bench: venv
	$(BIN)/python bench/bench_frames.py
	$(BIN)/python bench/bench_split.py
	$(BIN)/python bench/bench_build.py --scale $(SCALE) $(BENCH_UPSTREAM)
	$(BIN)/python bench/bench_eval.py

clean:
	rm -rf build release .release.staging .release.previous .release.lock .pytest_cache bench/results

distclean: clean
	rm -rf $(VENV) $(DAGSTER_HOME)
