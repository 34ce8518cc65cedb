"""ApacheKafka: a single-node Apache Kafka broker (KRaft, combined broker + controller) on loopback.

The reference that Kafka-wire behaviour is compared with (tests/interop) and measured against (bench). The jars
come from Maven Central through ``scripts/kafka/fetch.sh`` (``mvn dependency:copy-dependencies`` into
``~/.cache/oncelog/kafka/<version>/libs``, outside git); :func:`kafka_libs` finds them, :func:`fetch_kafka` fetches
them. A broker formats its own storage directory under ``data_dir``, binds free ports, and is ready when its log
says ``Kafka Server started``. ``python -m oncelog.testing.kafka [DATA_DIR]`` runs one until Ctrl-C.
:class:`KafkaGatewayProcess` runs oncelog's kafka-gateway in front of a local cluster, for the same clients.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.testing.servers import StartedProcesses, free_port, log_tail, stop_process

KAFKA_VERSION = "4.4.0"
"""The Apache Kafka release the reference broker runs (scripts/kafka/pom.xml pins the same)."""

_ROOT = Path(__file__).resolve().parents[3]
FETCH_SCRIPT = _ROOT / "scripts" / "kafka" / "fetch.sh"
READY_LINE = "Kafka Server started"

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaStartError(RuntimeError):
    """The broker exited or did not report readiness in time; the message carries its log tail."""


def cache_root() -> Path:
    """Where fetched Kafka releases live: ``$ONCELOG_KAFKA_CACHE`` or ``~/.cache/oncelog/kafka``."""
    return Path(os.environ.get("ONCELOG_KAFKA_CACHE", Path.home() / ".cache" / "oncelog" / "kafka"))


def kafka_libs(version: str = KAFKA_VERSION) -> Path | None:
    """The directory of the fetched jars, or None when ``scripts/kafka/fetch.sh`` has not completed."""
    libs = cache_root() / version / "libs"
    return libs if (libs / ".complete").exists() else None


def fetch_kafka(timeout_s: float = 900.0) -> Path:
    """Run ``scripts/kafka/fetch.sh`` (Maven Central through mvn) and return the jar directory.

    Raises:
        KafkaStartError: mvn failed; the message has its output.
    """
    done = subprocess.run(["bash", str(FETCH_SCRIPT)], capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise KafkaStartError(f"scripts/kafka/fetch.sh failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class ApacheKafka(StartedProcesses):
    """One broker process; ``start()`` formats and starts it, ``stop()`` stops it (SIGTERM, then SIGKILL).

    Args:
        data_dir: the KRaft storage directory, its configuration and ``kafka.log`` go here.
        libs: the jar directory (default: :func:`kafka_libs`).
        host: the interface to bind.
        heap: the JVM's ``-Xmx``.
        overrides: extra ``server.properties`` entries.
    """

    data_dir: Path
    libs: Path | None = None
    host: str = "127.0.0.1"
    heap: str = "768m"
    overrides: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the broker's PLAINTEXT listener."""
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's stdout and stderr."""
        return Path(self.data_dir) / "kafka.log"

    def properties(self, controller_port: int) -> dict[str, str]:
        """The broker's ``server.properties``: one node, every internal topic with one replica."""
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(Path(self.data_dir) / "log"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            **self.overrides,
        }

    def _java(self, main: str, *args: str, jvm: tuple[str, ...] = ()) -> list[str]:
        assert self.libs is not None
        return ["java", *jvm, "-cp", str(self.libs / "*"), main, *args]

    def start(self, timeout_s: float = 120.0) -> ApacheKafka:
        """Format the storage directory (once) and start the broker; returns once it serves.

        Raises:
            KafkaStartError: no jars (run scripts/kafka/fetch.sh), or the broker exited or stayed silent.
        """
        self.libs = self.libs or kafka_libs()
        if self.libs is None:
            raise KafkaStartError(f"Apache Kafka {KAFKA_VERSION} is not fetched: run scripts/kafka/fetch.sh")
        data_dir = Path(self.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        config = data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties(free_port(self.host)).items()))
        log4j = data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        jvm = (f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}")
        if not (data_dir / "log" / "meta.properties").exists():
            formatted = subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    _cluster_id(),
                    "-c",
                    str(config),
                    "--ignore-formatted",
                    jvm=jvm,
                ),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
            if formatted.returncode != 0:
                raise KafkaStartError(f"formatting {data_dir} failed:\n{formatted.stdout}\n{formatted.stderr}")
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(config), jvm=jvm),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_ready(time.monotonic() + timeout_s)
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if READY_LINE in self.log_file.read_text(errors="replace"):
                return
            if self.process is None or self.process.poll() is not None:
                raise KafkaStartError(f"the Kafka broker exited before serving:\n{self.log_tail()}")
            time.sleep(0.1)
        raise KafkaStartError(f"the Kafka broker did not start in time:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``timeout_s``; returns the exit code."""
        return stop_process(self.process, timeout_s)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's log."""
        return log_tail(self.log_file, lines)


@dataclass
class KafkaGatewayProcess(StartedProcesses):
    """``python -m oncelog.kafka_gateway`` in front of a running oncelog cluster, on a free loopback port.

    Args:
        bootstrap: any address of the oncelog cluster.
        data_dir: its ready file and ``kafka-gateway.log`` go here.
        env: extra environment (``ONCELOG_KAFKA_GATEWAY_*`` settings).
    """

    bootstrap: str
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    address: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def log_file(self) -> Path:
        """The gateway's log (JSON lines)."""
        return Path(self.data_dir) / "kafka-gateway.log"

    def start(self, timeout_s: float = 60.0) -> KafkaGatewayProcess:
        """Start the process and wait for its ready file; returns self with ``address`` set.

        Raises:
            KafkaStartError: the gateway exited or did not become ready; the message has its log tail.
        """
        data_dir = Path(self.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        ready = data_dir / "kafka-gateway.ready.json"
        ready.unlink(missing_ok=True)
        env = {
            **os.environ,
            "ONCELOG_BOOTSTRAP": self.bootstrap,
            "ONCELOG_KAFKA_GATEWAY_LISTEN": "127.0.0.1:0",
            "ONCELOG_KAFKA_GATEWAY_KAFKA_LISTEN": "127.0.0.1:0",
            "ONCELOG_READY_FILE": str(ready),
            "ONCELOG_PARENT_PID": str(os.getpid()),
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "oncelog.kafka_gateway"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready.exists():
                self.address = json.loads(ready.read_text())["kafka_address"]
                return self
            if self.process.poll() is not None:
                raise KafkaStartError(f"the kafka-gateway exited with {self.process.returncode}:\n{self._tail()}")
            time.sleep(0.05)
        raise KafkaStartError(f"the kafka-gateway did not become ready:\n{self._tail()}")

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code."""
        return stop_process(self.process, timeout_s)

    def _tail(self, lines: int = 30) -> str:
        return log_tail(self.log_file, lines)


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding (what ``random-uuid`` prints).

    Never one starting with ``-``: the storage tool would read it as an option and refuse to format (one start in
    64); Kafka's own ``Uuid.randomUuid`` draws again in that case too.
    """
    import base64

    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


def main(argv: list[str] | None = None) -> int:
    """``python -m oncelog.testing.kafka [DATA_DIR]``: fetch if needed, run one broker until Ctrl-C."""
    args = sys.argv[1:] if argv is None else argv
    data_dir = Path(args[0]) if args else Path(".oncelog") / "apache-kafka"
    libs = kafka_libs() or fetch_kafka()
    broker = ApacheKafka(data_dir, libs=libs).start()
    print(f"Apache Kafka {KAFKA_VERSION} serving on {broker.bootstrap} (log: {broker.log_file}); Ctrl-C stops it")
    try:
        assert broker.process is not None
        broker.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
