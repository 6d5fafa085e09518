"""Apache Kafka 4.3.1's own command-line tools, run as JVMs from the fetched classpath.

Used by tests/test_real_clients.py and ``benchmarks/proxy.py --kafka``. Standard library only (plus
tests/kafka_jars.py), so the benchmark can import it without pytest.

The 4.3.1 main classes (the ``bin/kafka-*.sh`` scripts name them):

=========================  ===================================================
``kafka-topics``           ``org.apache.kafka.tools.TopicCommand``
``kafka-configs``          ``kafka.admin.ConfigCommand`` (still in the Scala jar)
``kafka-cluster``          ``org.apache.kafka.tools.ClusterTool``
``kafka-consumer-groups``  ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``
``kafka-console-producer`` ``org.apache.kafka.tools.ConsoleProducer``
``kafka-console-consumer`` ``org.apache.kafka.tools.consumer.ConsoleConsumer``
producer / consumer perf   ``org.apache.kafka.tools.ProducerPerformance`` / ``ConsumerPerformance``
=========================  ===================================================

Tools log at WARN to stderr (their own log4j2 configuration, written next to the system temp
files), so stdout holds only what the tool prints for its user.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from kafka_jars import java_binary, kafka_classpath

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "kafka.admin.ConfigCommand"
CLUSTER = "org.apache.kafka.tools.ClusterTool"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"

_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d{HH:mm:ss,SSS}] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def tools_log4j_config() -> Path:
    path = Path(tempfile.gettempdir()) / "connect-bridge-kafka-tools-log4j2.properties"
    if not path.is_file() or path.read_text(encoding="utf-8") != _LOG4J:
        tmp = path.with_suffix(f".{id(path)}.tmp")
        tmp.write_text(_LOG4J, encoding="utf-8")
        tmp.replace(path)
    return path


def tool_command(main_class: str, *args: str, heap: str = "512m", fast_start: bool = True) -> list[str]:
    """``java ... MAIN ARGS``. ``fast_start`` (C1 only) halves a short tool's start-up on two cores;
    the benchmark turns it off, since it also slows a long run's hot loop."""
    return [
        java_binary(),
        "-Xms32m",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        *(["-XX:TieredStopAtLevel=1", "-Xshare:auto"] if fast_start else []),
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={tools_log4j_config()}",
        "-cp",
        kafka_classpath(),
        main_class,
        *args,
    ]


def run_tool(
    main_class: str,
    *args: str,
    input: str | None = None,
    timeout_s: float = 120.0,
    fast_start: bool = True,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a tool to completion; with ``check`` a non-zero exit raises with its output."""
    done = subprocess.run(
        tool_command(main_class, *args, fast_start=fast_start),
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} exited {done.returncode}\n"
            f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
        )
    return done


PRODUCER_PERF_LINE = re.compile(
    r"(?P<records>\d+) records sent, (?P<records_per_s>[\d.]+) records/sec \((?P<mb_per_s>[\d.]+) MB/sec\), "
    r"(?P<avg_ms>[\d.]+) ms avg latency, (?P<max_ms>[\d.]+) ms max latency, (?P<p50_ms>\d+) ms 50th, "
    r"(?P<p95_ms>\d+) ms 95th, (?P<p99_ms>\d+) ms 99th, (?P<p999_ms>\d+) ms 99.9th"
)


def producer_perf_summary(stdout: str) -> dict[str, float]:
    """The final summary line of ProducerPerformance (not its periodic progress lines)."""
    found = [m for m in PRODUCER_PERF_LINE.finditer(stdout)]
    if not found:
        raise ValueError(f"no ProducerPerformance summary in:\n{stdout[-2000:]}")
    return {k: float(v) for k, v in found[-1].groupdict().items()}


def consumer_perf_summary(stdout: str) -> dict[str, float]:
    """ConsumerPerformance's CSV line: ``start.time, end.time, data.consumed.in.MB, MB.sec,
    data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec``."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    return {n: float(v) for n, v in zip(names, values, strict=True) if not n.endswith(".time")}
