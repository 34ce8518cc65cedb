"""``oncelog``: run a local cluster and talk to one (typer + rich)."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import signal
import threading
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from oncelog.cli.common import SETTINGS
from oncelog.cli.demo import demo
from oncelog.cli.output import err, error, print_table, stdout_console
from oncelog.cli.spark_demo import spark_demo
from oncelog.cli.torture import torture
from oncelog.testing import SERVICES, ClusterStartError, LocalCluster
from oncelog.testing.cluster import KAFKA_GATEWAY, NodeProcess

app = typer.Typer(
    name="oncelog",
    help="Exactly-once messaging: idempotent producers, transactions and read_committed consumers over gRPC.",
    no_args_is_help=True,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        try:
            version = importlib.metadata.version("oncelog")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        typer.echo(f"oncelog {version}")
        raise typer.Exit()


@app.callback()
def root(
    timeout: float = typer.Option(
        SETTINGS.timeout_s,
        "--timeout",
        min=0.1,
        envvar="ONCELOG_TIMEOUT",
        help="seconds any network step may take (connecting, each request, each record's delivery) before the "
        "command fails with the reason; connecting gets at most 5 s",
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="show the client library's log on stderr"),
) -> None:
    """Exactly-once messaging: idempotent producers, transactions and read_committed consumers over gRPC."""
    SETTINGS.timeout_s = timeout
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        return
    # Each failure reaches the command as an exception and is printed once, as one line. The client library's log
    # and asyncio's (where grpc.aio reports a late completion for a client already closed, such as the admin
    # client a command used first: "Exception in callback PollerCompletionQueue._handle_events") stay silent.
    for name in ("oncelog", "asyncio"):
        quiet = logging.getLogger(name)
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())


@app.command()
def dev(
    data_dir: Path = typer.Option(Path(".oncelog"), "--data-dir", help="catalog, segments, logs and cluster.json"),
    storage_nodes: int = typer.Option(3, "--storage-nodes", min=1, max=16, help="partition-storage processes"),
    replication_factor: int | None = typer.Option(
        None,
        "--replication-factor",
        "-r",
        min=1,
        help="copies of each partition of topics created without -r; default 3, or the storage node count if lower",
    ),
    port_base: int = typer.Option(
        7100,
        "--port-base",
        min=0,
        max=65000,
        help="pid-allocator on +1, txn-coordinator +2, group-offsets +3, storage node i on +10+i; 0 picks free ports",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind"),
    kafka_gateway: bool = typer.Option(
        True,
        "--kafka-gateway/--no-kafka-gateway",
        help="also run the kafka-gateway for Kafka clients, on port-base + 1992 (9092 by default)",
    ),
) -> None:
    """Start a local cluster: every service as its own process, until Ctrl-C or SIGTERM.

    Endpoints are printed and written to DATA_DIR/cluster.json; clients and the other commands read it.

    Three storage nodes and replication factor 3 by default, so a local cluster shows what production does:
    kill a storage node and its partitions get a new leader within seconds (docs/replication.md).

    Example: oncelog dev --data-dir /tmp/oncelog --storage-nodes 1   (the lightest cluster, no replication)
    """
    factor = min(3, storage_nodes) if replication_factor is None else replication_factor
    if factor > storage_nodes:
        error(f"--replication-factor {factor} needs at least {factor} storage nodes; pass --storage-nodes {factor}")
        raise typer.Exit(2)
    cluster = LocalCluster(
        data_dir,
        storage_nodes=storage_nodes,
        host=host,
        base_port=port_base,
        replication_factor=factor,
        kafka_gateway=kafka_gateway,
    )
    with err().status("starting the local cluster…"):
        try:
            cluster.start()
        except ClusterStartError as exc:
            cluster.stop()
            error(f"failed to start: {exc}")
            raise typer.Exit(1) from exc
    table = Table()
    for column in ("service", "node", "address", "log"):
        table.add_column(column)
    order: dict[str, int] = {s: i for i, s in enumerate((*SERVICES, KAFKA_GATEWAY))}
    for node in sorted(cluster.nodes, key=lambda n: (order[n.service], n.index)):
        address = f"{node.kafka_address} (Kafka)" if node.kafka_address else node.address
        table.add_row(Text(node.service), Text(node.node_id), Text(address), Text(str(node.log_file)))
    print_table(table, "oncelog local cluster")
    console = stdout_console()
    console.print(Text(f"bootstrap: {cluster.bootstrap}   cluster file: {cluster.data_dir / 'cluster.json'}"))
    console.print(Text(f"other shells: export ONCELOG_BOOTSTRAP={cluster.bootstrap}"))
    if cluster.kafka_bootstrap:
        console.print(Text(f"Kafka clients: bootstrap.servers={cluster.kafka_bootstrap}"))
    console.print(
        Text(
            f"try:  grpcurl -plaintext {cluster.bootstrap} oncelog.api.cluster.v1.ClusterService/DescribeCluster"
            "   (Ctrl-C stops the cluster)"
        )
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    exit_code = 0
    while not stop.wait(0.5):
        dead = [n for n in cluster.nodes if not n.alive()]
        if dead:
            for node in dead:
                error(crash_line(cluster, node))
            exit_code = 1
            break
    with err().status("draining…"):
        codes = cluster.stop()
    err().print(Text(f"stopped: {codes}"))
    if exit_code:
        raise typer.Exit(exit_code)


def crash_line(cluster: LocalCluster, node: NodeProcess) -> str:
    """One line saying which process exited, how, its last log line and where its log is."""
    code = node.process.returncode if node.process is not None else None
    killed = code is not None and code < 0
    how = f"was killed by {signal.Signals(-code).name}" if killed and code else f"exited with code {code}"
    last = next((line for line in reversed(cluster.log_tail(node, 20).splitlines()) if line.strip()), "(empty log)")
    return f"{node.node_id} {how}; stopping the cluster. Last log line: {last.strip()}  (full log: {node.log_file})"


app.command("demo")(demo)
app.command("spark-demo")(spark_demo)
app.command("torture")(torture)

# The client command modules of oncelog.cli, in --help order. Each defines register(app); adding a command
# group is one line here.
COMMAND_MODULES = (
    "topics",
    "configs",
    "produce",
    "consume",
    "transactions",
    "producers",
    "groups",
    "partitions",
)
for _module in COMMAND_MODULES:
    importlib.import_module(f"oncelog.cli.{_module}").register(app)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="oncelog")
