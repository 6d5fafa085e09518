"""Spark is an extra: core commands never import it, the Spark commands say how to get it, and
``analyze`` of one small drill runs quietly (no JVM banner) with the checker's numbers.

The core-command tests run ``connect-bridge`` in a subprocess whose import system refuses the
extra's packages (a meta path finder inserted before anything is imported), so an import anywhere
on those paths fails the test instead of passing silently on a machine that has them installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_vectors
from connect_bridge.drills.checker import check_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL_DRILL = EXAMPLES / "rolling-upgrade-sessioned-to-new.json"
EXTRA = ("pyspark", "pandas", "pyarrow", "matplotlib")
BLOCKED_RUN = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from connect_bridge.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:  # --help
    status = exc.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print("LOADED " + ",".join(loaded), file=sys.stderr)
sys.exit(status)
"""


def _run_blocked(blocked: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    code = f"BLOCKED = {set(blocked)!r}\n{BLOCKED_RUN}"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, check=False
    )


def _stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if not line.startswith("LOADED ")]


def test_core_commands_run_without_the_spark_extra(tmp_path: Path) -> None:
    vector = next(v for v in load_vectors() if "hex" in v and "kind" in v)
    runs = {
        "codec": ("codec", "decode", "--kind", vector["kind"], vector["hex"]),
        "drill run": ("drill", "run", str(SMALL_DRILL), "--out", str(tmp_path / "drill")),
        "drill run --help": ("drill", "run", "--help"),
        "serve --help": ("serve", "--help"),
        "describe --help": ("describe", "--help"),
    }
    for what, argv in runs.items():
        proc = _run_blocked(EXTRA, *argv)
        assert proc.returncode == 0, f"{what}: {proc.stderr[-2000:]}"
        assert "LOADED \n" in proc.stderr + "\n", f"{what} imported part of the spark extra: {proc.stderr}"
        assert "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "drill" / "summary.json").read_text())["ok"] is True


INSTALL_SPARK = (
    "install the spark extra (in a clone: pip install -e '.[spark]'; a wheel: pip install 'WHEEL[spark]')"
)
"""How to get the extra: the package is not on PyPI, so never ``pip install 'connect-bridge[spark]'``."""


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (("analyze", "DRILL", "--out", "OUT"), "analyze"),
        (("drill", "fleet", "--count", "1", "--out", "OUT"), "drill fleet"),
        (("drill", "fleet", "--count", "1", "--checks-only", "--out", "OUT"), "drill fleet"),
    ],
)
def test_spark_commands_without_pyspark_say_what_to_install(
    tmp_path: Path, argv: tuple[str, ...], command: str
) -> None:
    (tmp_path / "drill").mkdir()
    (tmp_path / "drill" / "events.jsonl").write_text('{"t_ms":0,"type":"drill_end","worker":null}\n')
    paths = {"DRILL": str(tmp_path / "drill"), "OUT": str(tmp_path / "out")}
    proc = _run_blocked(("pyspark",), *(paths.get(a, a) for a in argv))
    assert proc.returncode == 1
    assert _stderr_lines(proc) == [f"connect-bridge: {command} needs PySpark: {INSTALL_SPARK}"]
    assert not (tmp_path / "out").exists()


def test_the_message_names_every_missing_package() -> None:
    proc = _run_blocked(("pyspark", "matplotlib"), "analyze", ".", "--out", "unused")
    assert _stderr_lines(proc) == [f"connect-bridge: analyze needs PySpark, matplotlib: {INSTALL_SPARK}"]


@pytest.mark.heavy
@pytest.mark.spark
def test_analyze_of_one_small_drill_is_quiet(tmp_path: Path) -> None:
    """The operator's command line, in a fresh process (its own JVM): stderr has no JVM or log4j
    banner, and the numbers are the checker's."""
    pytest.importorskip("pyspark")
    drill = tmp_path / "drill"
    cli = [sys.executable, "-m", "connect_bridge.cli"]
    subprocess.run([*cli, "drill", "run", str(SMALL_DRILL), "--out", str(drill)], check=True, timeout=120)
    proc = subprocess.run(
        [*cli, "analyze", str(drill), "--out", str(tmp_path / "out"), "--charts", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for noise in ("log4j", "WARN", "Using Spark", "setLogLevel", "NativeCodeLoader", "incubator"):
        assert noise not in proc.stderr, proc.stderr
    (summary,) = json.loads((tmp_path / "out" / "summary.json").read_text())["drills"]
    want = check_file(drill).to_json()
    assert {k: summary[k] for k in summary if k != "name"} == {k: want[k] for k in summary if k != "name"}
    assert json.loads(proc.stdout.splitlines()[-1])["events"] == want["events"]


@pytest.mark.parametrize(("level", "shown"), [("debug", True), ("info", False), ("warning", False)])
def test_spark_output_is_shown_only_at_debug(level: str, shown: bool) -> None:
    """``--log-level debug`` is the switch for the JVM's own output (docs/pipeline.md), checked
    without starting one: the CLI's logging set-up, then the session's question, in a fresh process."""
    code = (
        "from connect_bridge import logs\n"
        f"logs.configure_logging({level!r})\n"
        "from connect_bridge.pipeline import session\n"
        "print(session._verbose())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(shown)
