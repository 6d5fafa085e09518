"""Ctrl-C in ``analyze`` and ``drill fleet`` (docs/cli.md "Ctrl-C"): one line, exit status 130, no
traceback, and an ``--out`` the rerun accepts as it is. The heavy tests send a real SIGINT to a
real process, to its whole process group as a terminal's Ctrl-C does (the Spark JVM gets it too)
and to the Python process alone (``kill -INT``)."""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connect_bridge.cli_interrupt import INTERRUPTED_EXIT, OutState, run_interruptible

REPO = Path(__file__).resolve().parents[1]
CLI = (sys.executable, "-m", "connect_bridge.cli")


def _interrupt_self() -> int:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)  # the handler raises before this ends
    return 0


def test_an_interrupted_run_removes_the_out_it_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new"
    before = OutState(out)
    handler = signal.getsignal(signal.SIGINT)  # an earlier in-process SparkContext may have set one
    out.mkdir()
    (out / "part.parquet").write_text("half")

    def work() -> int:
        logging.getLogger("py4j.java_gateway").error(
            "while sending", exc_info=(KeyboardInterrupt, None, None)
        )
        return _interrupt_self()

    assert run_interruptible(work, before) == INTERRUPTED_EXIT
    assert not out.exists()
    assert capsys.readouterr().err == f"connect-bridge: interrupted; nothing was kept in --out {out}\n"
    assert signal.getsignal(signal.SIGINT) is handler  # put back


def test_an_interrupted_run_empties_an_empty_out_and_keeps_an_earlier_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    before = OutState(empty)
    (empty / "sub").mkdir()
    (empty / "sub" / "x").write_text("half")
    assert run_interruptible(_interrupt_self, before) == INTERRUPTED_EXIT
    assert empty.is_dir() and list(empty.iterdir()) == []

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "summary.json").write_text("{}")
    assert run_interruptible(_interrupt_self, OutState(earlier)) == INTERRUPTED_EXIT
    assert (earlier / "summary.json").exists()
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"connect-bridge: interrupted; --out {earlier} holds part of this run "
        "(rerun with --force to replace it)"
    )


def test_errors_that_are_not_an_interrupt_still_escape(tmp_path: Path) -> None:
    def broken() -> int:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        run_interruptible(broken, OutState(tmp_path / "x"))


def _interrupt_when(argv: list[str], cwd: Path, marker: str, group: bool) -> tuple[int, str]:
    """Run the CLI with stderr piped; once a line holds ``marker``, SIGINT (to the process group,
    or to the process only); (exit status, stderr)."""
    env = {**os.environ, "CONNECT_BRIDGE_PROGRESS_INTERVAL_S": "0.5"}
    proc = subprocess.Popen(
        [*CLI, *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    selector = selectors.DefaultSelector()
    selector.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(marker in line for line in seen):
        if selector.select(timeout=1) and (line := proc.stderr.readline()):
            seen.append(line.decode(errors="replace"))
        elif proc.poll() is not None:
            break
    assert any(marker in line for line in seen), "".join(seen)
    time.sleep(1.0)  # inside the phase, not at its first line
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read().decode(errors="replace")
    return proc.wait(120), "".join(seen) + rest


@pytest.mark.spark
@pytest.mark.heavy
@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "kill-int"])
def test_ctrl_c_in_analyze_ends_quietly_and_the_rerun_accepts_out(tmp_path: Path, group: bool) -> None:
    drill = subprocess.run(
        [*CLI, "drill", "run", str(REPO / "examples" / "rolling-restart-new.json"), "--out", "drill"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert drill.returncode in (0, 1), drill.stderr
    code, err = _interrupt_when(
        ["analyze", "drill", "--out", "report"], tmp_path, "reading 1 event log", group
    )
    assert code == INTERRUPTED_EXIT, err
    assert "Traceback" not in err and "internal error" not in err and "Py4J" not in err, err
    assert err.rstrip().splitlines()[-1] == "connect-bridge: interrupted; nothing was kept in --out report", (
        err
    )
    assert not (tmp_path / "report").exists()


@pytest.mark.spark
@pytest.mark.heavy
def test_ctrl_c_in_drill_fleet_ends_quietly(tmp_path: Path) -> None:
    code, err = _interrupt_when(
        ["drill", "fleet", "--count", "400", "--out", "fleet"], tmp_path, "running 400 drills", True
    )
    assert code == INTERRUPTED_EXIT, err
    assert "Traceback" not in err and "internal error" not in err and "Py4J" not in err, err
    assert err.rstrip().splitlines()[-1] == "connect-bridge: interrupted; nothing was kept in --out fleet", (
        err
    )
    assert not (tmp_path / "fleet").exists()
