"""Apache Kafka's jars on demand, for the real-Kafka tests (docs/real-kafka.md).

``kafka_classpath()`` returns a Java classpath holding Apache Kafka 4.3.1 (broker, Connect runtime
with its test connectors, command-line tools) and every runtime dependency, plus a log4j2 backend.
The jars are not in git: the first call copies them from Maven Central with the Maven project
``jvm/pom.xml`` into a cache directory, ``$CONNECT_BRIDGE_KAFKA_LIBS`` or by default
``~/.cache/connect-bridge/kafka-4.3.1/libs``. Later calls only check the cache.

A file lock (``<libs>.lock``) keeps two processes (two pytest runs, ``.ci/run`` and a developer)
from fetching at once; the one that waited finds the cache complete. The cache is complete when its
marker file names the current ``jvm/pom.xml`` (so adding a dependency to the pom fetches again).

Java 17+ and Maven must be installed. When they are not, ``KafkaJarsError`` says what is missing
(tests turn it into a failure, never a skip: a skipped integration test reads as a passing one).

Standard library only, so benchmarks and ``.ci/run`` can use it without pytest::

    python tests/kafka_jars.py     # fetch if needed, print the classpath
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "KAFKA_VERSION",
    "LIBS_ENV",
    "KafkaJarsError",
    "ensure_kafka_libs",
    "java_binary",
    "kafka_classpath",
    "libs_dir",
    "log4j_config",
]

KAFKA_VERSION = "4.3.1"
LIBS_ENV = "CONNECT_BRIDGE_KAFKA_LIBS"
MIN_JAVA = 17
REPO = Path(__file__).resolve().parents[1]
POM = REPO / "jvm" / "pom.xml"
LOG4J_CONFIG = REPO / "jvm" / "log4j2.properties"
MARKER = ".complete"
FETCH_TIMEOUT_S = 900.0
REQUIRED_JARS = (
    f"kafka_2.13-{KAFKA_VERSION}.jar",
    f"connect-runtime-{KAFKA_VERSION}.jar",
    f"connect-test-plugins-{KAFKA_VERSION}.jar",
    f"kafka-tools-{KAFKA_VERSION}.jar",
)
"""A complete cache has at least these (guards against a marker left over an emptied directory)."""


class KafkaJarsError(RuntimeError):
    """Java or Maven is missing, or Maven could not fetch Kafka's jars."""


def libs_dir() -> Path:
    """Where the jars go: ``$CONNECT_BRIDGE_KAFKA_LIBS`` or ``~/.cache/connect-bridge/kafka-4.3.1/libs``."""
    override = os.environ.get(LIBS_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "connect-bridge" / f"kafka-{KAFKA_VERSION}" / "libs"


def log4j_config() -> Path:
    """The log4j2 configuration the test JVMs use (console, millisecond timestamps)."""
    return LOG4J_CONFIG


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, checked to be Java 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    java = str(candidate) if candidate is not None and candidate.is_file() else shutil.which("java")
    if java is None:
        raise KafkaJarsError(
            f"the real-Kafka tests need Java {MIN_JAVA}+ (java not found on PATH or in $JAVA_HOME); "
            "install a JDK, e.g. apt-get install openjdk-17-jdk-headless"
        )
    major = _java_major(java)
    if major < MIN_JAVA:
        raise KafkaJarsError(f"the real-Kafka tests need Java {MIN_JAVA}+, {java} is Java {major}")
    return java


def _java_major(java: str) -> int:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KafkaJarsError(f"cannot run {java} -version: {exc}") from exc
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if found is None:
        raise KafkaJarsError(f"cannot tell the Java version from `{java} -version`: {out.strip()!r}")
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def _complete(libs: Path, digest: str) -> bool:
    try:
        if (libs / MARKER).read_text(encoding="utf-8").strip() != digest:
            return False
    except OSError:
        return False
    return all((libs / jar).is_file() for jar in REQUIRED_JARS)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # blocks while another process fetches
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_kafka_libs(*, quiet: bool = True) -> Path:
    """The cache directory, fetched first (under the lock) when it is missing or stale."""
    libs = libs_dir()
    digest = _pom_digest()
    if _complete(libs, digest):
        return libs
    with _locked(libs.parent / f"{libs.name}.lock"):
        if _complete(libs, digest):  # another process fetched while this one waited
            return libs
        _fetch(libs, digest, quiet=quiet)
    return libs


def _fetch(libs: Path, digest: str, *, quiet: bool) -> None:
    java_binary()  # Maven runs on Java; say so plainly when it is missing
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError(
            f"the real-Kafka tests need Maven to fetch Apache Kafka {KAFKA_VERSION} (mvn not found on "
            "PATH); install it, e.g. apt-get install maven"
        )
    libs.mkdir(parents=True, exist_ok=True)
    (libs / MARKER).unlink(missing_ok=True)
    for stale in libs.glob("*.jar"):  # a pom change may drop or replace a jar
        stale.unlink()
    command = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-Dkafka.libs={libs}",
    ]
    print(f"fetching Apache Kafka {KAFKA_VERSION} jars into {libs} (jvm/pom.xml)", file=sys.stderr)
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaJarsError(f"{' '.join(command)} did not finish in {FETCH_TIMEOUT_S:.0f}s") from exc
    if done.returncode != 0:
        output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:])
        raise KafkaJarsError(
            f"Maven could not fetch Apache Kafka {KAFKA_VERSION} (exit {done.returncode}): "
            f"{' '.join(command)}\n{output}"
        )
    missing = [jar for jar in REQUIRED_JARS if not (libs / jar).is_file()]
    if missing:
        raise KafkaJarsError(f"Maven finished but {libs} lacks {', '.join(missing)}")
    (libs / MARKER).write_text(digest + "\n", encoding="utf-8")


def kafka_classpath() -> str:
    """The classpath of Kafka's jars (a ``dir/*`` wildcard), fetching them first if needed."""
    return str(ensure_kafka_libs() / "*")


if __name__ == "__main__":
    try:
        print(kafka_classpath())
    except KafkaJarsError as exc:
        print(f"kafka_jars: {exc}", file=sys.stderr)
        sys.exit(1)
