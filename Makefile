# hookstream developer commands. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make test` runs the suite on two pytest-xdist workers: it mostly waits on brokers, workers and
# receivers (about 0.4 of a core serially), and each test owns its topics, groups, ports and data
# dirs. The heaviest files share one worker (tests/conftest.py). `make test PYTEST_PARALLEL=`
# runs it serially.
PYTEST_PARALLEL ?= -n 2 --dist loadfile --no-loadscope-reorder

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install hookstream with its dev tools

kafka: install ## Start the local Apache Kafka (KRaft, no Docker); harmless when running
	$(BIN)/hookstream kafka start

kafka-stop: install ## Stop the local Kafka
	$(BIN)/hookstream kafka stop

topics: kafka ## Create or update the topics declared in topics.yaml
	$(BIN)/hookstream topics apply

demo: install ## Run the whole thing: Kafka, topics, a worker, demo receivers, real deliveries
	$(BIN)/hookstream demo

worker: topics ## Run one worker in the foreground
	$(BIN)/hookstream worker

check: install ## Lint, format check and mypy --strict
	$(BIN)/ruff check streams tests bench chaos
	$(BIN)/ruff format --check streams tests bench chaos
	$(BIN)/mypy
	$(BIN)/lint-imports

test: install ## Run every test against the real local Kafka (started, then stopped, if none answers)
	@if $(BIN)/hookstream kafka status | grep -q '^metadata answers: yes'; then \
		$(BIN)/pytest $(PYTEST_PARALLEL); \
	else \
		$(BIN)/hookstream kafka start && { $(BIN)/pytest $(PYTEST_PARALLEL); rc=$$?; \
		echo "stopping the Kafka that make test started"; $(BIN)/hookstream kafka stop; exit $$rc; }; \
	fi

test-unit: install ## Run the unit tests only (no broker)
	$(BIN)/pytest tests/unit

bench: install kafka ## Run every benchmark (long); figures in bench/results/summary.json and docs/benchmarks.md
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench.http_clients --seconds 5 --concurrency 8,64 --json bench/results/raw/http_clients.json
	$(BIN)/python -m bench.e2e --scenario throughput --runs 3 --events 90000 --profile --own-broker
	$(BIN)/python -m bench.e2e --scenario latency --runs 3 --seconds 20 --rate 1000 --own-broker
	$(BIN)/python -m bench.e2e --scenario memory --runs 1 --subscriptions 100000 --rate 50
	$(BIN)/python -m bench.e2e --scenario fanout --runs 3
	$(BIN)/python -m bench.flow --scenario f3 --runs 3
	$(BIN)/python -m bench.flow --scenario f7 --runs 5
	$(BIN)/python -m bench.flow --scenario f1 --runs 3
	$(BIN)/python -m bench.flow --scenario f5 --runs 3
	$(BIN)/python -m bench.lookup --attempts 100000 --attempts 2000000
	$(BIN)/python -m bench.recovery --deliveries 2000 --compare
	$(BIN)/python -m bench.ab --before e9953bc^1 --after e9953bc --runs 3 --id H8
	$(BIN)/python -m bench.ab --before HEAD --after HEAD --before-env HOOKSTREAM_LEDGER_READER=false --runs 5 --events 90000 --id S6-cost --target 1.10
	$(BIN)/python -m bench.summary --docs

bench-smoke: install kafka ## A short run of the benchmark harness (sane figures, no thresholds)
	$(BIN)/python -m bench.e2e --scenario smoke --runs 1 --no-docs --results-dir bench/results/raw

chaos: install kafka ## Q1 chaos run: 100k deliveries, kill -9 a worker every 10-30 s, one broker restart
	$(BIN)/python -m chaos.run --deliveries 100000 --kills 12 --broker-restart --seed 7 --rate 400 --report chaos-report.json

chaos-cluster: install ## Q1 on three brokers: 50k+ deliveries, 3 leader kill -9s, a worker kill -9 during a failover, controller restart, rolling restarts
	$(BIN)/python -m chaos.cluster_run --deliveries 50000 --leader-kills 3 --seed 7 --rate 150 --gap 15 --summary $(CHAOS_CLUSTER_ARGS)

chaos-cluster-recovery: install ## chaos-cluster plus a suspension, its notice and a backfill across the faults (H3, H5, R2)
	$(BIN)/python -m chaos.cluster_run --deliveries 50000 --leader-kills 3 --seed 7 --rate 150 --gap 15 --recovery --report chaos-cluster-recovery-report.json $(CHAOS_CLUSTER_ARGS)

bench-cluster: install ## X4 on three brokers: 1/2/3 workers (ratio to one) and a worker's kill -9 failover
	$(BIN)/python -m bench.scaling_cluster --runs 3 --events 4000 --kills 3 $(BENCH_CLUSTER_ARGS)

soak: install kafka ## 30-minute soak: worker RSS, open fds and RocksDB size every 10 s
	$(BIN)/python -m chaos.soak --minutes 30 --rate 200 --report soak-report.json

deploy-check: install ## Validate the Dockerfile, docker-compose.yml and the Helm chart
	HOOKSTREAM_PYTHON=$(BIN)/python bash deploy/validate.sh

.PHONY: help install kafka kafka-stop topics demo worker check test test-unit bench bench-smoke bench-cluster chaos chaos-cluster chaos-cluster-recovery soak deploy-check
