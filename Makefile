# The two commands of the README: `make lab` runs the service, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: lab test lint install clean bench bench-quick bench-reference bench-compare soak soak-memory

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lab: $(STAMP)
	$(PY) -m lab

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -m "not stress" $(PYTEST_ARGS)

# The 30-minute soak of docs/reliability.md (Ironic-style cycles on 20 VMs, random worker kills).
soak: $(STAMP)
	$(PY) -m tests.reliability.soak --minutes 30 --vms 20

# Memory over time (issue #18): two hours of the same cycles on 10 VMs, no worker kills,
# RSS/PSS of every process and Redis's used memory printed every 5 minutes. Tasks are kept
# 30 min (run markers 1 h), so the second hour shows Redis at its steady state.
soak-memory: $(STAMP)
	$(PY) -m tests.reliability.soak --minutes 120 --vms 10 --max-kills 0 --sample-every 300 \
		--task-ttl 1800 --live --json var/soak-memory.json --var-dir var/soak-memory

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf var/lab var/test

# Reference benchmark runs (docs/benchmarks/README.md); each exits 1 when a target FAILs.
bench: $(STAMP)
	-$(PY) -m bench.fleet --sizes 3,10,50 --import-seconds 30 --workers 2 --modes fleetfish,sequential,sushy-tools --max-wait 100 --out docs/benchmarks/fleet-t30
	-$(PY) -m bench.fleet --sizes 200 --import-seconds 20 --workers 2 --modes fleetfish,sushy-tools --out docs/benchmarks/fleet-n200-t20
	-$(PY) -m bench.fleet --sizes 50 --import-seconds 30 --workers 2 --modes fleetfish --out docs/benchmarks/parked-n50-t30
	-$(PY) -m bench.fleet --sizes 200 --import-seconds 30 --workers 2 --modes fleetfish --out docs/benchmarks/parked-n200-t30
	-$(PY) -m bench.fleet --sizes 500 --import-seconds 30 --workers 2 --modes fleetfish --out docs/benchmarks/parked-n500-t30
	-$(PY) -m bench.fleet --sizes 200 --import-seconds 20 --workers 2 --modes fleetfish --watcher-in-workers --out docs/benchmarks/fleet-n200-t20-watcher-in-workers
	-$(PY) -m bench.fleet --sizes 200 --import-seconds 20 --workers 2 --modes fleetfish --service-cpus 1 --out docs/benchmarks/fleet-n200-t20-service-cpus1
	-$(PY) -m bench.fleet --sizes 3 --import-seconds 55 --workers 2 --modes fleetfish,sequential,sushy-tools --max-wait 100 --out docs/benchmarks/fleet-t55
	-$(PY) -m bench.fleet --sizes 3 --import-seconds 70 --modes sushy-tools --out docs/benchmarks/sushy-t70
	-$(PY) -m bench.api_latency --clients 50 --seconds 10 --out docs/benchmarks/api-latency
	$(PY) -m bench.imports > docs/benchmarks/imports.txt

# CPU per provisioned node of older code on this machine, measured by today's bench.fleet (run
# from a worktree of REF, with this checkout's bench/ copied in): the reference of the cost
# target is 8dc8dbe, the code before the DataVolume watch. Results in var/bench-ref-<commit>.
REF ?= 8dc8dbe
REF_SIZES ?= 50,200
bench-reference: $(STAMP)
	rm -rf var/ref-worktree && git worktree prune && git worktree add --detach var/ref-worktree $(REF)
	cp -r bench/. var/ref-worktree/bench/
	-cd var/ref-worktree && PYTHONPATH=. $(CURDIR)/$(PY) -m bench.fleet --sizes $(REF_SIZES) --import-seconds 30 --workers 2 --modes fleetfish --out $(CURDIR)/var/bench-ref-$(REF)
	git worktree remove --force var/ref-worktree

# The same comparison in turns (this checkout, then REF, then REF first...), ROUNDS times per
# size: each run's CPU per provisioned node, the means and their ratio. Results in
# var/bench-compare.
ROUNDS ?= 3
bench-compare: $(STAMP)
	$(PY) -m bench.compare --ref $(REF) --sizes $(REF_SIZES) --rounds $(ROUNDS)

# About a minute: 3 nodes, all three modes.
bench-quick: $(STAMP)
	$(PY) -m bench.fleet --sizes 3 --import-seconds 10 --modes fleetfish,sequential,sushy-tools --out var/bench/quick
