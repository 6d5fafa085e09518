"""Every command of ``README.md``'s ```sh blocks works as written.

Each block is split into commands (lines, then ``&&``) and each command is handled by the first
entry of :data:`HANDLERS` that matches it; a command no entry matches fails the test, so a new
README command cannot go unchecked.

- ``connect-bridge ...`` commands run, with ports and paths adapted (:func:`adapt`): ``/tmp/`` and
  ``tests/regressions`` go to the test's directory, the drill counts shrink to a few drills, the
  upstream ``broker:9092`` is a tansu broker, and each ``serve`` gets a free port, its own state
  directory and no metrics listener (overrides on its command line). A ``serve`` is started as a
  process, a new-protocol worker joins it, and it runs until the end; ``describe`` asks the last one
  started. The PySpark commands (``analyze``, ``drill fleet``) run in a test of their own, marked
  ``spark``.
- The set-up lines (``python3 -m venv``, ``. .venv/bin/activate``, ``pip install -e``) and the test
  suite line (``python -m pytest``) are not executed (installing into the running environment, or
  running the suite from inside itself, is not a test): the extras they install must exist in
  ``pyproject.toml``, the running interpreter must satisfy ``requires-python``, and the pytest
  markers the README names must be registered and assigned by ``tests/conftest.py``.
- The wheel lines run: ``pip wheel`` builds the wheel from this checkout into the test's directory,
  and the ``pip install`` of the wheel must name the file it built and an extra that exists; the
  wheel is installed without its dependencies into a directory of its own, where
  ``connect-bridge docs`` must list the shipped pages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import conftest
from doc_commands import REPO, Serve, Workers, count_fences, fenced_blocks, last_json, run_sh
from tansu import TansuBroker, free_port, tansu

__all__ = ["tansu"]  # re-exported fixture

README = REPO / "README.md"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
GROUP = "connect-cluster"
SPARK_COMMANDS = ("connect-bridge analyze", "connect-bridge drill fleet")
DRILLS = "8"
"""Drill counts of ``drill fleet`` / ``drill search`` in the test (the README's run for minutes)."""
TANSU_NODE_ID = 111
"""tansu's broker id: a proxy listener opens on ``listen port + 1 + node id`` (docs/upstream.md)."""


def readme_commands() -> list[str]:
    """Every command of the README's sh blocks, in order, comments stripped."""
    commands = []
    for block in fenced_blocks(README.read_text(encoding="utf-8")):
        assert block.lang == "sh", f"README line {block.line}: a ```{block.lang} block this test does not run"
        for line in block.body.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            commands += [part.strip() for part in line.split(" && ") if part.strip()]
    return commands


@dataclass
class Session:
    """What the commands of one test share: its directory, its bridges and their workers."""

    tmp: Path
    broker: TansuBroker | None = None
    bridges: list[Serve] = field(default_factory=list)
    workers: list[Workers] = field(default_factory=list)

    def adapt(self, command: str) -> str:
        """The command with the test's paths, ports and sizes (the explicit table of the docstring)."""
        table = [
            ("/tmp/", f"{self.tmp}/"),
            ("tests/regressions", str(self.tmp / "regressions")),
            ("--count 100000", f"--count {DRILLS}"),
            ("--count 2000", f"--count {DRILLS}"),
            ("--count 200", f"--count {DRILLS}"),
            ("--config bridge.yaml", f"--config {self.tmp / 'bridge.yaml'}"),
        ]
        if self.broker is not None:
            table.append(("--upstream broker:9092", f"--upstream {self.broker.bootstrap}"))
        if self.bridges:
            table.append(
                ("--bootstrap-server 127.0.0.1:9092", f"--bootstrap-server {self.bridges[-1].address}")
            )
        for old, new in table:
            command = command.replace(old, new)
        return command

    def serve(self, command: str) -> None:
        """Start a ``serve`` of the README on a free port (and its relay ports free), join a worker."""
        port = next(p for p in iter(free_port, None) if p + 1 + TANSU_NODE_ID < 65536)
        state = self.tmp / f"state-{len(self.bridges)}"
        overrides = f" --listen 127.0.0.1:{port} --state-dir {state} --metrics-listen off"
        bridge = Serve(self.adapt(command) + overrides, self.tmp / f"bridge-{len(self.bridges)}.log")
        self.bridges.append(bridge)
        workers = Workers()
        self.workers.append(workers)
        workers.start(port, GROUP, 1)

    def close(self) -> None:
        for workers in self.workers:
            workers.close()
        codes = [bridge.stop() for bridge in self.bridges]
        assert codes == [0] * len(codes), codes


def run_command(session: Session, command: str) -> None:
    """A ``connect-bridge`` command other than ``serve``: exit 0 and stable content."""
    out = run_sh(session.adapt(command))
    if " describe " in command:
        (group,) = last_json(out) if "--json" in command else [None]
        assert group is None or (group["group_id"] == GROUP and len(group["members"]) == 1), group
    if " codec decode " in command:
        assert last_json(out)["url"]
    if " drill run " in command or " drill search " in command or " analyze " in command:
        assert last_json(out)


def check_venv(_: Session, command: str) -> None:
    """``python3 -m venv .venv``: this interpreter satisfies ``requires-python``."""
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert minimum and sys.version_info[:2] >= (int(minimum[1]), int(minimum[2]))


def check_activate(_: Session, command: str) -> None:
    """``. .venv/bin/activate``: the venv the README creates is the one the test runs from."""
    assert command == ". .venv/bin/activate"


def check_install(_: Session, command: str) -> None:
    """``pip install -e .[EXTRAS]``: the extras exist; this checkout is what is installed."""
    target = re.fullmatch(r"pip install -e '?\.(?:\[([a-z0-9,-]+)\])?'?", command)
    assert target, command
    extras = set((target[1] or "").split(",")) - {""}
    assert extras <= set(PYPROJECT["project"].get("optional-dependencies", {})), extras
    import connect_bridge

    assert Path(connect_bridge.__file__).resolve().is_relative_to(REPO / "src")


WHEEL_BUILD = re.compile(r"pip wheel --no-deps -w (?P<dir>\S+) \.")
WHEEL_INSTALL = re.compile(r"pip install '(?P<wheel>[^'\[]+\.whl)(?:\[(?P<extras>[a-z0-9,-]+)\])?'")


WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "src", "docs")
"""What setuptools reads to build the wheel (``src/connect_bridge/docs`` links to ``docs``)."""


def build_wheel(session: Session, command: str) -> None:
    """``pip wheel --no-deps -w DIR .``: builds this checkout's wheel into the test's ``DIR``, from a
    copy of its sources (setuptools writes ``build/`` and ``*.egg-info`` next to what it builds)."""
    target = WHEEL_BUILD.fullmatch(command)
    assert target, command
    checkout = session.tmp / "checkout"
    checkout.mkdir()
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    for name in WHEEL_SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, checkout / name, symlinks=True, ignore=junk)
        else:
            shutil.copy2(source, checkout / name)
    out = session.tmp / target["dir"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), "."],
        cwd=checkout,
        check=True,
        capture_output=True,
        timeout=600,
    )


SHIPPED_DOCS = """\
import sys
import connect_bridge
from connect_bridge.cli import main
assert connect_bridge.__file__.startswith(sys.argv[1]), connect_bridge.__file__
sys.exit(main(["docs"]))
"""
"""``connect-bridge docs`` of the package installed from the wheel (its directory: ``argv[1]``)."""


def install_wheel(session: Session, command: str) -> None:
    """``pip install 'DIR/NAME.whl[EXTRAS]'``: the file the build wrote, an extra that exists; the
    wheel installs (dependencies left out: they are the running environment's) and ships the docs."""
    target = WHEEL_INSTALL.fullmatch(command)
    assert target, command
    wheel = session.tmp / target["wheel"]
    built = sorted(p.name for p in wheel.parent.glob("*.whl"))
    assert built == [wheel.name], f"the README installs {wheel.name}, pip wheel built {built}"
    extras = set((target["extras"] or "").split(",")) - {""}
    assert extras <= set(PYPROJECT["project"].get("optional-dependencies", {})), extras
    site = session.tmp / "wheel-site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    listed = subprocess.run(
        [sys.executable, "-c", SHIPPED_DOCS, str(site)],
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=session.tmp,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    pages = {p.stem for p in (REPO / "docs").glob("*.md")}
    assert pages <= set(listed.stdout.split()), listed.stdout


def check_pytest(_: Session, command: str) -> None:
    """``python -m pytest ...``: the markers the README names are registered and assigned."""
    text = README.read_text(encoding="utf-8")
    registered = {m.split(":", 1)[0] for m in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]}
    assigned = {
        m
        for table in (conftest.MARKS_BY_FIXTURE, conftest.MARKS_BY_MODULE)
        for v in table.values()
        for m in v
    }
    expressions = re.findall(r'-m "([^"]+)"', text)
    named = {w for e in expressions for w in e.split() if w not in {"not", "and", "or"}}
    listed = re.search(r"[Mm]arkers say what a heavy test needs: ([^(]*)", text)
    assert listed, "the README no longer lists the finer markers"
    named |= set(re.findall(r"`(\w+)`", listed[1]))
    assert {"heavy", "spark", "jvm"} <= named, named
    assert named <= registered and named - {"heavy"} <= assigned, (named, registered, assigned)
    assert re.fullmatch(r"python -m pytest -q( -m \"not heavy\")?", command), command


Handler = Callable[[Session, str], None]
HANDLERS: list[tuple[str, Handler]] = [
    (r"python3 -m venv \.venv", check_venv),
    (r"\. \.venv/bin/activate", check_activate),
    (r"pip wheel .*", build_wheel),
    (r"pip install '[^']+\.whl.*", install_wheel),
    (r"pip install .*", check_install),
    (r"python -m pytest.*", check_pytest),
    (r"connect-bridge serve.*", Session.serve),
    (r"connect-bridge .*", run_command),
]


def handler_of(command: str) -> Handler:
    for pattern, handler in HANDLERS:
        if re.fullmatch(pattern, command):
            return handler
    raise AssertionError(f"README command without a check: {command}")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    (tmp_path / "bridge.yaml").write_text(yaml.safe_dump({"coordinator": {"session_timeout_ms": 10000}}))
    s = Session(tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.live  # serve processes; tansu makes it broker + heavy (tests/conftest.py)
def test_readme_commands(tansu: TansuBroker, session: Session) -> None:
    """Everything but PySpark, in README order (``describe`` needs the ``serve`` before it)."""
    session.broker = tansu
    commands = [c for c in readme_commands() if not c.startswith(SPARK_COMMANDS)]
    for command in commands:
        handler_of(command)(session, command)
    assert len(session.bridges) == sum(c.startswith("connect-bridge serve") for c in commands) >= 2


@pytest.mark.spark
@pytest.mark.heavy  # no fixture says so: the Spark runs are CLI processes, not the spark fixture
def test_readme_spark_commands(session: Session) -> None:
    """``analyze`` and ``drill fleet``, after the ``drill run`` that writes what ``analyze`` reads.

    The Spark commands run at the same time, each a process of its own as an operator's shell would
    start them: they read and write apart (``analyze`` reads what ``drill run`` wrote, each fleet
    writes its own directory), and most of each one's time is its driver JVM starting and waiting
    on itself, which one after the other left a core idle."""
    commands = [c for c in readme_commands() if c.startswith((*SPARK_COMMANDS, "connect-bridge drill run"))]
    spark = [c for c in commands if c.startswith(SPARK_COMMANDS)]
    assert len(spark) >= 2
    for command in commands:
        if command not in spark:
            run_command(session, command)
    with ThreadPoolExecutor(len(spark), thread_name_prefix="spark") as pool:
        for future in [pool.submit(run_command, session, command) for command in spark]:
            future.result()
    assert (session.tmp / "report" / "index.html").is_file()


def test_readme_blocks_are_parsed() -> None:
    """Every fence of the README is seen, and every command has a handler."""
    text = README.read_text(encoding="utf-8")
    assert count_fences(text) == 2 * len(fenced_blocks(text))
    for command in readme_commands():
        handler_of(command)
