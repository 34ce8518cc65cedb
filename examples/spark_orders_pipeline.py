"""Orders pipeline: an exactly-once PySpark Structured Streaming job from one oncelog topic to another.

The job reads JSON orders from ``orders`` (read_committed), parses them, enriches each order with its
customer's region from a static dimension table (a stream-static join, no state) and its total and size
tier, and writes one JSON record per order, keyed by customer, to ``orders-enriched`` through the
exactly-once ``oncelog`` sink. Input progress lives in the Spark checkpoint; the sink commits each task's
rows in one oncelog transaction tagged with the micro-batch id, so a driver killed at any point and
restarted from the same checkpoint neither loses nor duplicates an order.

Input record value (one order)::

    {"order_id": "o-0000042", "customer": "c-017", "sku": "sku-3", "quantity": 2, "unit_price_cents": 1299}

Output record value::

    {"order_id": "o-0000042", "customer": "c-017", "region": "apac", "quantity": 2, "total_cents": 2598,
     "tier": "small", "source_partition": 1, "source_offset": 118}

Run it locally against ``oncelog dev`` (``make run`` drives it, kills it and checks the output)::

    python examples/spark_orders_pipeline.py --bootstrap 127.0.0.1:7101 --checkpoint /tmp/orders-ckpt

or on a cluster, with the ``oncelog[spark]`` package installed on the driver and every executor::

    spark-submit --master spark://spark-master:7077 examples/spark_orders_pipeline.py \\
        --bootstrap txn-coordinator.oncelog.svc:7102 --checkpoint s3a://bucket/checkpoints/orders

or through a Spark Connect server whose Python has the ``oncelog[spark]`` package (the data source runs there)::

    python examples/spark_orders_pipeline.py --remote sc://spark-connect:15002 \\
        --bootstrap txn-coordinator.oncelog.svc:7102 --checkpoint /shared/checkpoints/orders

Every micro-batch prints one JSON line ``{"batch": <id>, "rows": <input rows>, "ms": <its duration>}`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REGIONS = ("emea", "amer", "apac")
"""Regions of the customer dimension; customer ``c-NNN`` lives in ``REGIONS[NNN % 3]``."""

CUSTOMERS = 50
"""Customers ``c-000`` … ``c-049`` in the dimension table."""

LARGE_ORDER_CENTS = 10_000
"""Orders of at least this total are tier ``large``."""

ORDER_SCHEMA = "order_id STRING, customer STRING, sku STRING, quantity INT, unit_price_cents LONG"


def region_of(customer: str) -> str:
    """The region the dimension table gives ``customer`` (the verification recomputes it with this)."""
    return REGIONS[int(customer.rsplit("-", 1)[1]) % len(REGIONS)]


def enrich(order: dict[str, Any], partition: int, offset: int) -> dict[str, Any]:
    """The output record of one order, in plain Python: the reference the Spark plan must agree with."""
    total = order["quantity"] * order["unit_price_cents"]
    return {
        "order_id": order["order_id"],
        "customer": order["customer"],
        "region": region_of(order["customer"]),
        "quantity": order["quantity"],
        "total_cents": total,
        "tier": "large" if total >= LARGE_ORDER_CENTS else "small",
        "source_partition": partition,
        "source_offset": offset,
    }


def _session(master: str | None, local_dir: str, remote: str | None = None) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("oncelog-orders-pipeline")
    if remote:
        # Spark Connect: the server runs the query (and the data source's Python) and holds the session's conf
        return (
            builder.remote(remote)
            .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
            .config("spark.sql.adaptive.streaming.stateless.enabled", "false")
            .getOrCreate()
        )
    if master:
        builder = builder.master(master)
    if (master or "").startswith("local"):
        # local runs: keep every socket on loopback, no UI, a quick JVM (reference pyspark-connector §7, §8)
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.local.dir", local_dir)
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        )
    return (
        builder.config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        # the exactly-once sink needs a micro-batch's Spark partitions to stay the same across restarts
        .config("spark.sql.adaptive.streaming.stateless.enabled", "false")
        .getOrCreate()
    )


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    """Source → parse → enrich (stream-static join) → exactly-once sink; returns the started query."""
    from pyspark.sql import functions as F

    customers = spark.createDataFrame(
        [(f"c-{i:03d}", region_of(f"c-{i:03d}")) for i in range(CUSTOMERS)], "customer STRING, region STRING"
    )
    orders = (
        spark.readStream.format("oncelog")
        .option("bootstrap", args.bootstrap)
        .option("topic", args.source)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
        .load()
        .select(
            F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("order"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
        )
        .select("order.*", "source_partition", "source_offset")
    )
    total = F.col("quantity") * F.col("unit_price_cents")
    enriched = orders.join(F.broadcast(customers), "customer", "left").select(
        F.col("customer").alias("key"),
        F.to_json(
            F.struct(
                "order_id",
                "customer",
                "region",
                "quantity",
                total.alias("total_cents"),
                F.when(total >= LARGE_ORDER_CENTS, F.lit("large")).otherwise(F.lit("small")).alias("tier"),
                "source_partition",
                "source_offset",
            )
        ).alias("value"),
    )
    writer = (
        enriched.writeStream.format("oncelog")
        .option("bootstrap", args.bootstrap)
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .queryName("orders-enriched")
    )
    if args.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.start()


def _report_progress(query: Any, seen: set[int]) -> bool:
    """Print a line for every micro-batch not reported yet; True when one of them read rows."""
    moved = False
    for progress in query.recentProgress:
        batch = progress["batchId"]
        # over Spark Connect a progress report may leave numInputRows and durations out (None)
        rows = progress["numInputRows"] or 0
        if batch not in seen and rows > 0:
            seen.add(batch)
            moved = True
            line = {"batch": batch, "rows": rows, "ms": (progress["durationMs"] or {}).get("triggerExecution", 0)}
            print(json.dumps(line), flush=True)
    return moved


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, start the query and run it until killed, until idle with ``--stop-when-idle``, or until
    ``--stop-file`` exists."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="address of any oncelog service, host:port")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint location (keep it across restarts)")
    parser.add_argument("--source", default="orders", help="topic of JSON orders (default: orders)")
    parser.add_argument("--sink", default="orders-enriched", help="output topic (default: orders-enriched)")
    parser.add_argument("--master", default=None, help="Spark master when not set by spark-submit, e.g. local[2,2]")
    parser.add_argument("--remote", default=None, help="Spark Connect server to run on instead, e.g. sc://host:15002")
    parser.add_argument("--max-records-per-trigger", type=int, default=2000, help="input rows per micro-batch")
    parser.add_argument("--trigger-seconds", type=float, default=0, help="processing-time trigger (0: back to back)")
    parser.add_argument(
        "--stop-when-idle",
        type=float,
        default=0,
        help="stop cleanly after this many seconds without input rows (0: run until killed)",
    )
    parser.add_argument(
        "--stop-file",
        type=Path,
        default=None,
        help="stop cleanly, between micro-batches, once this file exists (a supervisor creates it when it has seen "
        "every output it expects)",
    )
    args = parser.parse_args(argv)
    if args.max_records_per_trigger < 1:
        parser.error("--max-records-per-trigger must be at least 1")
    if args.master and args.master.startswith("local"):
        # Python workers must run this interpreter (it has pyarrow and oncelog), not python3 on PATH (§7)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from oncelog.spark import OncelogDataSource

    spark = _session(args.master, tempfile.mkdtemp(prefix="orders-pipeline-"), args.remote)
    if not args.remote:
        spark.sparkContext.setLogLevel("ERROR")  # a Connect client has no SparkContext
    # over Spark Connect the class travels to the server pickled by reference: oncelog must be importable there
    spark.dataSource.register(OncelogDataSource)
    query = build_query(spark, args)
    seen: set[int] = set()
    last_rows = time.monotonic()
    while query.isActive:
        query.awaitTermination(0.5)
        if _report_progress(query, seen):
            last_rows = time.monotonic()
        busy = query.status["isTriggerActive"] or query.status["isDataAvailable"]
        idle = args.stop_when_idle > 0 and not busy and time.monotonic() - last_rows >= args.stop_when_idle
        told = args.stop_file is not None and not query.status["isTriggerActive"] and args.stop_file.exists()
        if idle or told:
            query.stop()
    _report_progress(query, seen)
    if query.exception() is not None:
        print(f"the query failed: {query.exception()}", file=sys.stderr)
        return 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
