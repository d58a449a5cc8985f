# ProcessBench build. Every target creates the virtualenv and installs the pinned set when missing.
#   make rebuild [SCALE=demo|release]   generate the sample corpora and materialize every asset through Dagster
#   make test [TESTS=tests/test_x.py]   lint (below), then the test suite (or a part of it); builds lmms-eval's venv first
#   make lmms-venv                      lmms-eval 0.7.3 in a virtualenv of its own (.venv-lmms, requirements-lmms.lock,
#                                       Python 3.11: the lock's CPU torch is a cp311 wheel), for tests/test_lmms_eval.py
#   make test-fast                      lint (below), then the tests but the end-to-end builds (-m "not slow")
#   make lint                           ruff check . and ruff format --check . (pyproject.toml [tool.ruff])
#   make format                         ruff format . (the tree is formatted; make lint checks it)
#   make dev                            the Dagster UI on 127.0.0.1:$(PORT) (Ctrl-C, SIGTERM to it or to make stops it)
#   make check-regen                    rebuild the demo release and compare its checksums with tests/regen/demo.sha256
#   make regen-lock                     update that lock after a deliberate change (commit it with the change)
#   make bench [BENCH_UPSTREAM="--upstream gm100=PATH ..."]
#                                       frame-extraction, split and build benchmarks (cold build, rebuild with nothing
#                                       changed, rebuild after one template edit) and the eval runner's overhead per
#                                       item against a local server (numbers, not pass/fail)
#   make bench-steps [BENCH_STEPS_ARGS="--sources reassemble,aist"]
#                                       the step track (T13) built at release scale from the sample corpora, one source
#                                       at a time at nice 19, and the gate table of docs/steps.md printed (slow: GM-100
#                                       about half an hour cold on 2 cores; the work folders under build/bench_steps
#                                       are kept so later runs only redo the changed steps)
#   make faults [FAULT_ARGS="--publish-kills 3"]
#                                       the fault campaign: every kind of bench/fault_kinds.yaml planted and counted
#                                       (faults survived, bad inputs handled, tampers caught, bombs under 1 GiB);
#                                       tampers use release/ when there is one (docs/faults.md)
#   make clean                          remove build outputs (keeps the virtualenv)

# The interpreter: PYTHON=... when given, else the newest of python3.13, python3.12, python3.11 (then python3) on the
# PATH that runs and is one of the supported versions (a pyenv shim of a version not selected does not run).
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	  $$p -c 'import sys; sys.exit(sys.version_info[:2] not in [(3, 11), (3, 12), (3, 13)])' 2>/dev/null \
	  && { echo $$p; break; }; done)
VENV   := .venv
BIN    := $(VENV)/bin
SCALE  ?= demo
PORT   ?= 3000
# quoted wherever a recipe uses it: the clone's path may hold spaces (make targets below are relative for that reason)
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export PYTHONHASHSEED := 0

# lmms-eval's own virtualenv: its dependencies (torch, transformers, av<16, ...) conflict with the project's, so it
# lives beside .venv; `make test` builds it once (kept until requirements-lmms.lock changes) and names its interpreter
# to the tests in PROCESSBENCH_LMMS_EVAL_PYTHON. LMMS_PYTHON=... picks the interpreter (default: python3.11 on the
# PATH, else a pyenv-installed 3.11).
LMMS_VENV   := .venv-lmms
LMMS_PYTHON ?= $(shell for p in python3.11 "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.11.*/bin/python3.11; do \
	  "$$p" -c '' 2>/dev/null && { echo "$$p"; break; }; done)

.PHONY: venv lmms-venv rebuild test test-fast lint format dev check-regen regen-lock bench bench-steps faults validate clean distclean

venv: $(VENV)/.installed .dagster_home/dagster.yaml

$(VENV)/.installed: pyproject.toml requirements.lock
	@test -x $(BIN)/python || test -n "$(PYTHON)" || { echo "processbench needs Python 3.11, 3.12 or 3.13 \
	(none found as python3.13, python3.12, python3.11 or python3 on the PATH): install one (apt install python3.12, \
	brew install python@3.12, uv python install 3.12, pyenv install 3.12) or name it: make PYTHON=/path/to/python3.12" >&2; \
	exit 1; }
	@test -x $(BIN)/python || "$(PYTHON)" -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

lmms-venv: $(LMMS_VENV)/.installed

$(LMMS_VENV)/.installed: requirements-lmms.lock
	@test -x $(LMMS_VENV)/bin/python || test -n "$(LMMS_PYTHON)" || { echo "lmms-eval's virtualenv needs Python 3.11 \
	(none found as python3.11 on the PATH or under pyenv): name one with make LMMS_PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(LMMS_VENV)/bin/python || "$(LMMS_PYTHON)" -m venv $(LMMS_VENV)
	$(LMMS_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-lmms.lock
	@touch $@

.dagster_home/dagster.yaml:
	@mkdir -p .dagster_home
	@printf 'telemetry:\n  enabled: false\npython_logs:\n  python_log_level: INFO\n' > $@

rebuild: venv
	$(BIN)/processbench build --samples --scale $(SCALE)
	$(BIN)/processbench validate release

test: venv lmms-venv
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	PROCESSBENCH_LMMS_EVAL_PYTHON="$(CURDIR)/$(LMMS_VENV)/bin/python" $(BIN)/python -m pytest -q -p no:cacheprovider $(TESTS)

test-fast: venv
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

lint: venv
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

format: venv
	$(BIN)/python -m ruff format .

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

bench-steps: venv
	$(BIN)/python bench/step_gates.py $(BENCH_STEPS_ARGS)

faults: venv
	$(BIN)/python bench/fault_campaign.py $(FAULT_ARGS)

clean:
	rm -rf build release .release.staging .release.previous .release.lock .pytest_cache bench/results

distclean: clean
	rm -rf $(VENV) $(LMMS_VENV) "$(DAGSTER_HOME)"
