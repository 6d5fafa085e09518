"""The connect-bridge-worker add-on jar (jvm/connect-bridge-worker) on demand, for the jvm tests.

``ensure_addon_jar()`` builds it the one documented way (``mvn -q -f jvm/connect-bridge-worker/pom.xml
package``, with ``-B``; its JUnit tests run as part of it, so a source change that breaks them fails
the build here too) and keeps the jar in
``~/.cache/connect-bridge/addon/<digest>/``, where the digest covers the module's pom and sources:
any change builds again, no change costs nothing. A file lock keeps two processes from building
at once. Standard library only.

    python tests/addon_jar.py            # build if needed, print the jar's path
    python tests/addon_jar.py --rebuild  # build (JUnit tests included) even if cached: .ci/run
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kafka_jars import KafkaJarsError, java_binary

__all__ = ["ADDON_DIR", "addon_digest", "ensure_addon_jar"]

REPO = Path(__file__).resolve().parents[1]
ADDON_DIR = REPO / "jvm" / "connect-bridge-worker"
JAR_NAME = "connect-bridge-worker-0.1.0.jar"
BUILD_TIMEOUT_S = 900.0


def addon_digest() -> str:
    """sha256 over the module's pom and every file under src/ (paths and contents)."""
    h = hashlib.sha256()
    files = [ADDON_DIR / "pom.xml", *sorted(p for p in (ADDON_DIR / "src").rglob("*") if p.is_file())]
    for path in files:
        h.update(str(path.relative_to(ADDON_DIR)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """One build at a time across processes (pytest runs, .ci/run, a developer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cache_root() -> Path:
    return Path.home() / ".cache" / "connect-bridge" / "addon"


def ensure_addon_jar(*, quiet: bool = True, rebuild: bool = False) -> Path:
    """The add-on jar for the current sources, built first (under the lock) when not cached, or
    always with ``rebuild`` (``.ci/run``: its JUnit tests run on every CI run, and the jvm tests
    then find the jar it built instead of building it a second time)."""
    digest = addon_digest()
    jar = _cache_root() / digest[:16] / JAR_NAME
    if jar.is_file() and not rebuild:
        return jar
    with _build_lock(_cache_root() / "build.lock"):
        if jar.is_file() and not rebuild:
            return jar
        _build(jar, quiet=quiet)
    return jar


def _build(jar: Path, *, quiet: bool) -> None:
    java_binary()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError("building the connect-bridge-worker add-on needs Maven (mvn not on PATH)")
    command = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(ADDON_DIR / "pom.xml"),
        "package",
    ]
    print(f"building {JAR_NAME} (jvm/connect-bridge-worker)", file=sys.stderr)
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaJarsError(f"{' '.join(command)} did not finish in {BUILD_TIMEOUT_S:.0f}s") from exc
    built = ADDON_DIR / "target" / JAR_NAME
    if done.returncode != 0 or not built.is_file():
        output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:])
        raise KafkaJarsError(
            f"Maven could not build the add-on (exit {done.returncode}): {' '.join(command)}\n{output}"
        )
    jar.parent.mkdir(parents=True, exist_ok=True)
    partial = jar.with_suffix(".partial")
    shutil.copyfile(built, partial)
    partial.replace(jar)


if __name__ == "__main__":
    try:
        print(ensure_addon_jar(rebuild="--rebuild" in sys.argv[1:]))
    except KafkaJarsError as exc:
        print(f"addon_jar: {exc}", file=sys.stderr)
        sys.exit(1)
