"""A local SparkSession set up the way this machine needs it (design/spark-connector.md §7, §8).

Shared by the Spark tests, the Spark benchmark and ``oncelog spark-demo``: Python workers run this interpreter
(which has pyarrow and oncelog), every Spark socket stays on loopback, the UI is off, logging goes to stderr at
ERROR, and the ``oncelog`` data source is registered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[3]
KAFKA_CONNECTOR_FETCH_SCRIPT = _ROOT / "scripts" / "spark" / "fetch-kafka-connector.sh"

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM flags that start Spark faster on a small machine: C1 only and the serial collector
(design/spark-connector.md §8)."""


def spark_unavailable() -> str | None:
    """Why Spark cannot run here (the extra or Java missing), with the fix; None when it can."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed ({exc}): pip install -e '.[spark]'"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "Java 17 or 21 is needed for Spark: install a JDK or set JAVA_HOME"
    return None


def kafka_connector_cache_root() -> Path:
    """Where Spark's Kafka connector jars live: ``$ONCELOG_SPARK_KAFKA_CACHE`` or ``~/.cache/oncelog/spark-kafka``."""
    return Path(os.environ.get("ONCELOG_SPARK_KAFKA_CACHE", Path.home() / ".cache" / "oncelog" / "spark-kafka"))


def kafka_connector_jars() -> list[Path] | None:
    """The jars of Spark's own Kafka connector (``format("kafka")``) for the installed pyspark, or None when
    ``scripts/spark/fetch-kafka-connector.sh`` has not completed."""
    import pyspark

    libs = kafka_connector_cache_root() / f"pyspark-{pyspark.__version__}" / "libs"
    return sorted(libs.glob("*.jar")) if (libs / ".complete").exists() else None


def kafka_connector_version(jars: Sequence[Path]) -> str:
    """The spark-sql-kafka-0-10 release the fetched ``jars`` are (the installed pyspark's, or the newest served)."""
    return (Path(jars[0]).parent / "CONNECTOR_VERSION").read_text().strip()


def fetch_kafka_connector(timeout_s: float = 900.0) -> list[Path]:
    """Run ``scripts/spark/fetch-kafka-connector.sh`` (Maven Central through mvn) and return the connector's jars.

    Raises:
        RuntimeError: mvn failed; the message has its output.
    """
    done = subprocess.run(
        ["bash", str(KAFKA_CONNECTOR_FETCH_SCRIPT)],
        capture_output=True, text=True, timeout=timeout_s, check=False, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"scripts/spark/fetch-kafka-connector.sh failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return sorted(Path(done.stdout.strip().splitlines()[-1]).glob("*.jar"))


def use_this_python() -> None:
    """Make Spark's Python workers run this interpreter and bind to loopback (design/spark-connector.md §7)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # the host name may resolve to loopback; keep every Spark socket there instead of the first NIC
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@contextmanager
def local_spark_session(
    tmp: Path,
    *,
    master: str = "local[2,2]",
    app_name: str = "oncelog",
    java_options: str = QUICK_JVM,
    jars: Sequence[Path] = (),
) -> Iterator[Any]:
    """A started ``SparkSession`` on ``master`` with its scratch space under ``tmp``; stopped on exit.

    ``jars`` go on ``spark.jars`` (e.g. :func:`kafka_connector_jars` for Spark's own ``kafka`` format).

    ``local[2,2]`` gives two task threads and two attempts per task, so task retries happen as on a
    cluster (design/spark-connector.md §3.4). Shuffles use two partitions, and empty micro-batches are not run.
    """
    use_this_python()
    from pyspark.sql import SparkSession

    from oncelog.spark import OncelogDataSource

    tmp.mkdir(parents=True, exist_ok=True)
    log4j = tmp / "log4j2.properties"
    log4j.write_text(
        "rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
    )
    builder = SparkSession.builder
    if jars:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
    session = (
        builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", str(tmp))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        # the oncelog sink refuses adaptive execution of stateless streams (partitions must not move on restart)
        .config("spark.sql.adaptive.streaming.stateless.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"{java_options} -Dlog4j2.configurationFile=file:{log4j}".strip())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(OncelogDataSource)
    try:
        yield session
    finally:
        session.stop()
