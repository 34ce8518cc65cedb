# One place for every task. `make run` and `make test` bootstrap .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,postgres,spark,arrow
STAMP := $(VENV)/.installed-$(shell echo "$(EXTRAS)" | tr ',' '-')
PYTEST_ARGS ?=

.PHONY: torture mutants test-outbox test-spark-cluster run demo cluster test test-repeat dev gen-protos record-vectors api-docs check-protos lint typecheck bench bench-quick bench-pid-allocator clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

## run: the main job: the Spark orders pipeline on a local cluster, its driver killed with SIGKILL, output checked
run: $(STAMP)
	$(VENV)/bin/oncelog spark-demo

## demo: the client-library demo: three transactional copiers in one consumer group, SIGKILLed at random, output == input once (no Spark)
demo: $(STAMP)
	$(VENV)/bin/oncelog demo

## cluster: start the local cluster (every service as its own process) until Ctrl-C
cluster: $(STAMP)
	$(VENV)/bin/oncelog dev --data-dir .oncelog

## dev: the local cluster like `cluster`, on free ports (addresses in .oncelog/cluster.json), until Ctrl-C
dev: $(STAMP)
	$(VENV)/bin/oncelog dev --data-dir .oncelog --port-base 0

## test: the whole suite (what CI runs)
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

## test-outbox: the outbox crash windows, every one on SQLite and on PostgreSQL (the default suite runs a subset)
test-outbox: $(STAMP)
	$(PY) -m pytest -m "outbox_matrix or not outbox_matrix" tests/integration/test_prepared_transactions.py $(PYTEST_ARGS)

## test-spark-cluster: the orders pipeline on a Spark standalone master and two workers (an executor, a worker and the
## driver SIGKILLed) and over Spark Connect (the server SIGKILLed); CI runs it after `make test`
test-spark-cluster: $(STAMP)
	$(PY) -m pytest -m spark_cluster tests/spark/test_spark_cluster.py $(PYTEST_ARGS)

## test-kafka: the Kafka-wire tests alone (tests/interop): Apache Kafka 4.4 from Maven Central vs the kafka-gateway
test-kafka: $(STAMP)
	scripts/kafka/fetch.sh >/dev/null
	ONCELOG_REQUIRE_KAFKA=1 $(PY) -m pytest tests/interop $(PYTEST_ARGS)

## test-repeat: the whole suite N times in a row (N=5 by default), each run a fresh pytest process, stopping at the
## first failing test; PYTEST_ARGS narrows it (e.g. PYTEST_ARGS=tests/integration/test_txn_coordinator.py)
N ?= 5
test-repeat: $(STAMP)
	@for run in $$(seq 1 $(N)); do \
		echo "== make test-repeat: run $$run of $(N)"; \
		$(PY) -m pytest -x $(PYTEST_ARGS) || { echo "== run $$run of $(N) failed"; exit 1; }; \
	done; echo "== all $(N) runs passed"

## torture: 30 minutes of `oncelog torture` with every fault kind, on a PostgreSQL catalog (report in .oncelog-torture/),
## then the whole mutation campaign (make mutants): about 40 minutes
torture: $(STAMP)
	$(VENV)/bin/oncelog torture --minutes 30 --nemesis kill,pause,partition,flaky,disk,fsync,zombie,lag-kill,lease-pause,catalog
	$(PY) -m pytest -m campaign -v tests/integration/test_torture_mutants.py

## mutants: the mutation campaign: every deliberate bug of oncelog.torture.mutants must fail a torture run within 5 runs
mutants: $(STAMP)
	$(PY) -m pytest -m campaign -v tests/integration/test_torture_mutants.py

## gen-protos: regenerate the committed Python and Go code from proto/ (the Go plugins come from the Go module proxy)
gen-protos: $(STAMP)
	$(PY) scripts/gen_protos.py
	$(PY) scripts/gen_go_protos.py

## record-vectors: rewrite testdata/record-batches, the RecordBatch v2 vectors every client must reproduce
record-vectors: $(STAMP)
	$(PY) scripts/gen_record_batch_vectors.py

## api-docs: render docs/api.md from the proto comments
api-docs: $(STAMP)
	$(PY) scripts/gen_api_docs.py

check-protos: $(STAMP)
	$(PY) scripts/gen_protos.py --check
	$(PY) scripts/gen_go_protos.py --check
	$(PY) scripts/gen_record_batch_vectors.py --check

## lint: ruff (rules and formatting), the import boundaries (import-linter, [tool.importlinter] in pyproject.toml), then buf lint and buf breaking on proto/ (buf is built from the Go module proxy; see scripts/check_proto_contract.py)
lint: $(STAMP)
	$(VENV)/bin/ruff check libs services tests scripts bench
	$(VENV)/bin/ruff format --check libs services tests scripts bench
	$(VENV)/bin/lint-imports
	$(PY) scripts/check_proto_contract.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy libs/oncelog services/oncelog

## bench: oncelog against Apache Kafka 4.4 in one interleaved run (5 runs; table, bench/results/<date>.json, plots; docs/performance.md)
bench: $(STAMP)
	$(PY) -m bench.yardstick

## bench-quick: the same in its smoke form (one run, small counts)
bench-quick: $(STAMP)
	$(PY) -m bench.yardstick --quick

## bench-pid-allocator: pid-allocator rate on SQLite and PostgreSQL vs raw gRPC and raw SQL; others: python -m bench.<name>
bench-pid-allocator: $(STAMP)
	$(PY) -m bench.pid_allocator

clean:
	rm -rf .oncelog .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
