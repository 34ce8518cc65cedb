"""Prepared transactions, check-back and the outbox against real processes (design/kafka-semantics.md §5.7).

The cluster runs every service as a process with a fast check-back (asked after 300 ms, three attempts). The
outbox's crash windows run a real application process (tests/integration/outbox_app.py) that is killed with SIGKILL
at the named point, on SQLite and on PostgreSQL: afterwards the event is readable at read_committed exactly once if
and only if the order row committed, whether the restarted application or the check-back finished it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog.api.txn import v1 as pb
from oncelog.client import AdminClient, IllegalStateError, PreparedTransaction, Producer, ProducerFencedError
from oncelog.client.services import TransactionCoordinatorClient
from oncelog.client.two_phase import TokenMismatchError
from oncelog.errors import InvalidTxnState
from oncelog.outbox import CheckBackServer
from oncelog.rpc import aio_channel
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all
from oncelog.testing.servers import free_port
from oncelog.vocabulary import ControlType

pytestmark = pytest.mark.timeout(180)

APP = Path(__file__).with_name("outbox_app.py")
ATTEMPTS = 3
ENV = {
    "ONCELOG_TXN_COORDINATOR_CHECK_BACK_AFTER_MS": "300",
    "ONCELOG_TXN_COORDINATOR_CHECK_BACK_INTERVAL_MS": "150",
    "ONCELOG_TXN_COORDINATOR_CHECK_BACK_MAX_ATTEMPTS": str(ATTEMPTS),
    "ONCELOG_TXN_COORDINATOR_CHECK_BACK_SWEEP_INTERVAL_MS": "50",
    "ONCELOG_TXN_COORDINATOR_CHECK_BACK_TIMEOUT_MS": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("prepared"), env=ENV) as running:
        yield running


def new_topic(cluster: LocalCluster) -> str:
    topic = "t" + uuid.uuid4().hex[:10]
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([topic])
    return topic


def values(cluster: LocalCluster, topic: str) -> list[bytes]:
    """What a read_committed consumer reads, once no transaction on the topic is undecided."""
    return [r.value or b"" for r in read_all(cluster.bootstrap, topic, "read_committed", timeout_s=60)]


def state_of(cluster: LocalCluster, tid: str) -> str:
    with AdminClient(cluster.bootstrap) as admin:
        return admin.describe_transactions([tid])[tid].state


def prepared_producer(
    cluster: LocalCluster, topic: str, tid: str, **prepare: str
) -> tuple[Producer, PreparedTransaction]:
    producer = Producer(cluster.bootstrap, transactional_id=tid)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"prepared")
    return producer, producer.prepare_transaction(**prepare)


# ------------------------------------------------------------------------------------------ producer


def test_a_new_instance_completes_the_prepared_transaction_and_the_old_one_is_fenced(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster), "zombie-" + uuid.uuid4().hex[:6]
    zombie, token = prepared_producer(cluster, topic, tid)
    assert state_of(cluster, tid) == "prepared"
    with Producer(cluster.bootstrap, transactional_id=tid) as owner:
        assert owner.init_transactions(keep_prepared=True) == token
        with pytest.raises(ProducerFencedError):
            zombie.complete_transaction(token, commit=False)
        owner.complete_transaction(token, commit=True, wait_for_completion=True)
        assert values(cluster, topic) == [b"prepared"]
        # the owner goes on with ordinary transactions
        owner.begin_transaction()
        owner.send(topic, b"next")
        owner.commit_transaction()
    zombie.close()
    assert values(cluster, topic) == [b"prepared", b"next"]


def test_init_without_keep_prepared_aborts_the_prepared_transaction(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster), "fresh-" + uuid.uuid4().hex[:6]
    old, _ = prepared_producer(cluster, topic, tid)
    with Producer(cluster.bootstrap, transactional_id=tid) as new:
        assert new.init_transactions() is None
    old.close()
    assert values(cluster, topic) == []  # decided (the read waits for that) and not committed
    assert state_of(cluster, tid) == "empty"  # the new instance's, after the abort completed


def test_bad_tokens_get_precise_errors_and_change_nothing(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster), "bad-" + uuid.uuid4().hex[:6]
    producer, token = prepared_producer(cluster, topic, tid)
    wrong_epoch = PreparedTransaction(tid, token.producer_id, token.producer_epoch + 5)
    with pytest.raises(TokenMismatchError, match="is not the prepared transaction of this producer"):
        producer.complete_transaction(wrong_epoch, commit=True)
    with pytest.raises(ValueError, match="is for transactional id 'other'"):
        producer.complete_transaction(PreparedTransaction("other", token.producer_id, token.producer_epoch), True)
    with pytest.raises(ValueError, match="not a prepared-transaction token"):
        PreparedTransaction.from_text("12:x")

    async def raw_complete(epoch: int) -> None:
        [address] = cluster.addresses("txn-coordinator")
        async with aio_channel(address) as channel:
            client = TransactionCoordinatorClient(lambda _a: channel, timeout_s=10)
            identity = producer.producer_id_and_epoch
            assert identity is not None
            bad = PreparedTransaction(tid, token.producer_id, epoch)
            await client.complete_transaction(address, identity, bad, ControlType.COMMIT)

    # the coordinator checks the token too, for clients that do not
    with pytest.raises(InvalidTxnState, match=rf"does not name its prepared transaction.*epoch {token.producer_epoch}"):
        asyncio.run(raw_complete(token.producer_epoch + 5))
    assert state_of(cluster, tid) == "prepared"
    producer.complete_transaction(token, commit=True)  # still usable: the right token completes
    with pytest.raises(IllegalStateError, match="needs a prepared transaction"):
        producer.complete_transaction(token, commit=True)
    producer.begin_transaction()
    with pytest.raises(IllegalStateError, match="at least one record"):
        producer.prepare_transaction()
    producer.close()
    assert values(cluster, topic) == [b"prepared"]


# ------------------------------------------------------------------------------------------ check-back


def test_check_back_endpoint_down_is_retried_then_the_default_aborts(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster), "down-" + uuid.uuid4().hex[:6]
    producer, _ = prepared_producer(cluster, topic, tid, check_back_address=f"127.0.0.1:{free_port()}")
    # the application stays alive but never completes; nothing listens at the check-back address
    assert values(cluster, topic) == []
    assert state_of(cluster, tid) == "complete_abort"
    [coordinator] = [n for n in cluster.nodes if n.service == "txn-coordinator"]
    log = coordinator.log_file.read_text(errors="replace")
    assert f"no answer after {ATTEMPTS} check-back attempt(s)" in log and repr(tid) in log
    producer.close()


class UnknownForever(pb.TransactionCheckServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def CheckTransaction(
        self, request: pb.CheckTransactionRequest, context: object
    ) -> pb.CheckTransactionResponse:
        self.calls += 1
        return pb.CheckTransactionResponse(result=pb.TRANSACTION_CHECK_RESULT_UNKNOWN)


def test_check_back_unknown_forever_applies_the_default_after_the_attempts(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster), "unknown-" + uuid.uuid4().hex[:6]
    servicer = UnknownForever()
    with CheckBackServer(None, servicer=servicer) as check_back:
        producer, _ = prepared_producer(cluster, topic, tid, check_back_address=check_back.address)
        assert values(cluster, topic) == []
    assert servicer.calls == ATTEMPTS
    assert state_of(cluster, tid) == "complete_abort"
    producer.close()


# ------------------------------------------------------------------------------------------ outbox crash windows


def run_app(cluster: LocalCluster, *args: str, crash_at: str | None = None) -> str:
    """Run the application; with ``crash_at``, SIGKILL it once it reports that point. Returns its output."""
    command = [sys.executable, str(APP), *args, "--bootstrap", cluster.bootstrap]
    if crash_at is None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout
    app = subprocess.Popen(
        [*command, "--crash-at", crash_at], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert app.stdout is not None
    deadline = time.monotonic() + 120
    lines = []
    for line in app.stdout:
        lines.append(line)
        if line.strip() == f"AT {crash_at}":
            break
        assert time.monotonic() < deadline
    else:
        app.wait(timeout=10)
        stderr = app.stderr.read()[-3000:] if app.stderr else ""
        pytest.fail(f"the application ended before {crash_at}: {''.join(lines)} {stderr}")
    app.send_signal(signal.SIGKILL)
    assert app.wait(timeout=30) == -signal.SIGKILL  # the fault landed: killed at that point, not exited
    return "".join(lines)


def order_rows(db: str, order: int) -> int:
    engine = sa.create_engine(db)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM orders WHERE id = :id"), {"id": order}).scalar_one()
    finally:
        engine.dispose()


@pytest.fixture
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The application's database: a SQLite file, or a fresh database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    server = request.getfixturevalue("postgres_url")
    name = "app_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return server.rsplit("/", 1)[0] + "/" + name


# (database, crash point, whether the database row commits). Every window on SQLite; on PostgreSQL the default suite
# runs the two claim outcomes (the restart's rollback, the check-back's commit) and `make test-outbox` the rest
# (marker outbox_matrix), to keep the default suite's cost bounded.
MATRIX = pytest.mark.outbox_matrix
WINDOWS = [
    ("sqlite", "before_prepare", False),
    ("sqlite", "after_prepare", False),
    ("sqlite", "after_db_commit", True),
    ("sqlite", "after_complete", True),
    ("postgres", "after_prepare", False),
    pytest.param("postgres", "before_prepare", False, marks=MATRIX),
    pytest.param("postgres", "after_db_commit", True, marks=MATRIX),
    pytest.param("postgres", "after_complete", True, marks=MATRIX),
]


@pytest.mark.parametrize(("app_db", "crash_at", "committed"), WINDOWS, indirect=["app_db"])
def test_outbox_crash_then_restart_leaves_the_event_exactly_when_the_row_committed(
    cluster: LocalCluster, app_db: str, crash_at: str, committed: bool
) -> None:
    database_url = app_db
    topic, tid, order = new_topic(cluster), "orders-" + uuid.uuid4().hex[:6], 7
    common = ("--db", database_url, "--tid", tid, "--topic", topic, "--order", str(order))
    run_app(cluster, "send", *common, crash_at=crash_at)
    restarted = run_app(cluster, "recover", *common)
    # the restart finished what the crash left prepared; before prepare and after complete nothing was left
    expected = {"after_prepare": "False", "after_db_commit": "True"}.get(crash_at, "None")
    assert f"RECOVERED {expected}" in restarted
    rows = order_rows(database_url, order)
    assert rows == int(committed)
    assert values(cluster, topic) == [f"order-{order}".encode()] * rows


CHECK_BACK_WINDOWS = [
    ("sqlite", "after_prepare", False),
    ("sqlite", "after_db_commit", True),
    ("postgres", "after_db_commit", True),
    pytest.param("postgres", "after_prepare", False, marks=MATRIX),
]


@pytest.mark.parametrize(("app_db", "crash_at", "committed"), CHECK_BACK_WINDOWS, indirect=["app_db"])
def test_outbox_crash_is_finished_by_the_check_back_as_the_database_decided(
    cluster: LocalCluster, app_db: str, crash_at: str, committed: bool
) -> None:
    database_url = app_db
    topic, tid, order = new_topic(cluster), "orders-" + uuid.uuid4().hex[:6], 8
    engine = sa.create_engine(database_url)
    try:
        with CheckBackServer(engine) as check_back:
            args = ("--db", database_url, "--tid", tid, "--topic", topic, "--order", str(order))
            run_app(cluster, "send", *args, "--check-back", check_back.address, crash_at=crash_at)
            events = values(cluster, topic)  # waits until the prepared transaction is decided
            calls = check_back.servicer.calls  # type: ignore[attr-defined]
    finally:
        engine.dispose()
    assert calls >= 1  # nobody restarted: the check-back decided it
    assert state_of(cluster, tid) == ("complete_commit" if committed else "complete_abort")
    assert order_rows(database_url, order) == int(committed)
    assert events == [f"order-{order}".encode()] * int(committed)


def test_atomic_send_block_that_raises_rolls_back_both_and_the_producer_goes_on(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    from sqlalchemy.orm import Session

    from oncelog.outbox import atomic_send, create_outbox_table, recover

    topic, tid = new_topic(cluster), "raising-" + uuid.uuid4().hex[:6]
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    rows = sa.Table("rows", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    rows.metadata.create_all(engine)
    create_outbox_table(engine)
    with Producer(cluster.bootstrap, transactional_id=tid) as producer:
        assert recover(producer, engine) is None
        with (
            pytest.raises(RuntimeError, match="the block failed"),
            Session(engine) as session,
            atomic_send(session, producer) as send,
        ):
            session.execute(sa.insert(rows).values(id=1))
            send(topic, b"lost")
            raise RuntimeError("the block failed")
        with Session(engine) as session, atomic_send(session, producer) as send:
            session.execute(sa.insert(rows).values(id=2))
            send(topic, b"kept")
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(sa.select(rows.c.id))] == [2]
    engine.dispose()
    assert values(cluster, topic) == [b"kept"]


# ------------------------------------------------------------------------------------------ tooling and example


def test_cli_lists_prepared_transactions_with_their_age(cluster: LocalCluster) -> None:
    from typer.testing import CliRunner

    from oncelog.cli import app

    topic, tid = new_topic(cluster), "listed-" + uuid.uuid4().hex[:6]
    producer, _ = prepared_producer(cluster, topic, tid)
    try:
        result = CliRunner().invoke(
            app, ["transactions", "list", "--state", "prepared", "-o", "json", "-b", cluster.bootstrap]
        )
        assert result.exit_code == 0, result.output
        [row] = [r for r in json.loads(result.stdout) if r["transactional_id"] == tid]
        assert row["state"] == "prepared" and row["prepared"] != "-"
        assert row["prepared_age"].endswith(("ms", "s"))
    finally:
        producer.complete_transaction(producer.prepared_transaction, commit=False)  # type: ignore[arg-type]
        producer.close()


def test_orders_outbox_example_writes_each_order_and_its_event_once(cluster: LocalCluster, tmp_path: Path) -> None:
    topic, db = new_topic(cluster), f"sqlite:///{tmp_path / 'orders.db'}"
    example = Path(__file__).resolve().parents[2] / "examples" / "orders_outbox.py"
    command = [sys.executable, str(example), "--db", db, "--bootstrap", cluster.bootstrap, "--topic", topic]
    done = subprocess.run([*command, "--orders", "3"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    engine = sa.create_engine(db)
    with engine.connect() as conn:
        ids = [row[0] for row in conn.execute(sa.text("SELECT id FROM orders ORDER BY id"))]
    engine.dispose()
    assert ids == [1, 2, 3]
    assert [json.loads(v)["order"] for v in values(cluster, topic)] == ids
