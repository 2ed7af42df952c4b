PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test fuzz lint typecheck install clean bench console console-types screenshots

# The web console (console/, Vue + Vite): rebuilt when its sources or lockfile change.
# Needs node 20+ and npm; the build lands in src/jobring/admin/console/dist (shipped in the wheel).
CONSOLE_SOURCES := $(shell find console -path console/node_modules -prune -o -type f -print 2>/dev/null)
CONSOLE_STAMP := src/jobring/admin/console/dist/index.html

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# `make run` needs the admin (the `admin` extra); `pip install jobring` alone is the executor
# library, the client and the CLI.
$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[admin]'
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[admin,test]'
	touch $@ $(STAMP_RUN)

install: $(STAMP_RUN)

console/node_modules/.package-lock.json: console/package-lock.json
	cd console && npm ci --no-audit --no-fund
	touch $@

$(CONSOLE_STAMP): $(CONSOLE_SOURCES) console/node_modules/.package-lock.json
	cd console && npm run build

console: $(CONSOLE_STAMP)

# After an API change: regenerate the console's OpenAPI document and TypeScript types.
console-types: $(STAMP_RUN) console/node_modules/.package-lock.json
	$(BIN)/python -m jobring.admin.api.management.openapi_dump > console/openapi.json
	cd console && npm run gen:api

screenshots: $(STAMP_TEST) console
	$(BIN)/python -m tests.console.screenshots

run: $(STAMP_RUN) console
	$(BIN)/jobring run

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP_TEST)
	$(BIN)/mypy

# Three pytest workers, one test file each at a time: most of the suite waits on real
# processes and databases, so three workers on two cores take far less than one. The tests
# judged by real-time precision (marker `timing`: chaos, takeover, fire times) run afterwards
# without that load, two files at a time: they mostly wait (alone they kept a third of the
# machine busy, 255 s of CPU in 417 s), and two at a time took 238 s instead of 417. The few
# that fail even beside one other (marker `quiet`) run last, alone.
PYTEST_WORKERS ?= 3
TIMING_WORKERS ?= 2

# The OpenAPI fuzz test runs in its own pytest beside the parallel lane, and neither lane
# collects it: schemathesis draws its coverage examples while collecting it (about a minute of
# CPU, mostly the calendar operations' 20,000-item arrays), which every xdist worker would pay.
# It is all CPU (one core, 400 s alone): niced, it takes what the lane leaves (the lane's admins,
# executors and databases waited for it), and an operation's examples may take five minutes
# (24 s alone) before they count as hung.
# Sources are compiled first: with PYTHONDONTWRITEBYTECODE set, every admin and executor process
# the suite starts would otherwise compile jobring's modules again (~0.4 s each). Each lane's
# time per test is kept in $(VENV)/junit-*.xml, to find what makes the suite long.
FUZZ_TEST := tests/admin/api/test_fuzz_openapi.py
FUZZ_LOG := $(VENV)/fuzz-test.log
test: $(STAMP_TEST) console lint typecheck
	cd console && npm test
	$(BIN)/python -m compileall -q src
	nice -n 10 $(BIN)/python -m pytest -o timeout=300 $(FUZZ_TEST) > $(FUZZ_LOG) 2>&1 & fuzz=$$!; \
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not timing" --durations=40 \
	  --junitxml=$(VENV)/junit-lane.xml --ignore=$(FUZZ_TEST); lane=$$?; \
	wait $$fuzz; fuzzed=$$?; echo "== $(FUZZ_TEST), run beside the lane:"; cat $(FUZZ_LOG); \
	test $$lane -eq 0 && test $$fuzzed -eq 0
	$(BIN)/python -m pytest -n $(TIMING_WORKERS) --dist loadfile -m "timing and not quiet" --durations=40 \
	  --junitxml=$(VENV)/junit-timing.xml --ignore=$(FUZZ_TEST); timing=$$?; \
	$(BIN)/python -m pytest -m quiet --durations=10 --junitxml=$(VENV)/junit-quiet.xml --ignore=$(FUZZ_TEST); \
	quiet=$$?; test $$timing -eq 0 && test $$quiet -eq 0

# A deeper OpenAPI fuzz run than make test's bounded one (200 generated requests per operation).
fuzz: $(STAMP_TEST)
	JOBRING_FUZZ_EXAMPLES=$${JOBRING_FUZZ_EXAMPLES:-200} $(BIN)/python -m pytest -o timeout=3600 tests/admin/api/test_fuzz_openapi.py

clean:
	rm -rf $(VENV) src/jobring/admin/console/dist jobring.db .pytest_cache .mypy_cache .ruff_cache
