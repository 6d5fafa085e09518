"""Progress bars (docs/cli.md): on stderr when it is a terminal (a pseudo-terminal here), nothing at
all when it is a pipe or a file, nothing with ``-q``; stdout keeps only the result either way."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from connect_bridge import progress
from polling import wait_until

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "examples" / "rolling-restart-new.json"
CLI = (sys.executable, "-m", "connect_bridge.cli")
ELAPSED = re.compile(r"\[\d\d:\d\d")
"""tqdm's elapsed time, as ``[00:01`` at the start of its bracket."""


def pty_pair(rows: int, cols: int) -> tuple[int, int]:
    """A pseudo-terminal (master, slave); ``rows``×``cols`` 0×0 is what a fresh one reports."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave


def read_all(master: int) -> str:
    """Everything written to the terminal (EIO once every writer has closed its side)."""
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def written_so_far(master: int) -> str:
    """What a terminal this process writes to has received (read while the writing side is still
    open: Linux drops a pseudo-terminal's unread output when its last writer closes)."""
    os.set_blocking(master, False)
    chunks = []
    while True:
        try:
            chunks.append(os.read(master, 65536))
        except BlockingIOError:
            break
    return b"".join(chunks).decode(errors="replace")


def run_cli(*argv: str, rows: int | None = None, cols: int = 0) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal of that size (``rows`` None: on a pipe);
    returns (exit status, stdout, stderr)."""
    if rows is None:
        done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=120, check=False)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty_pair(rows, cols)
    proc = subprocess.Popen([*CLI, *argv], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = read_all(master)  # until the child exits: it holds the only other end
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out.decode(), err


@pytest.mark.parametrize(("rows", "cols"), [(0, 0), (30, 120)], ids=["unsized", "120-columns"])
def test_drill_run_shows_a_bar_on_a_terminal(tmp_path: Path, rows: int, cols: int) -> None:
    code, out, err = run_cli("drill", "run", str(SCENARIO), "--out", str(tmp_path), rows=rows, cols=cols)
    assert code == 0, err
    assert json.loads(out)["name"] == "rolling-restart-new"  # stdout: the result only
    end_s = json.loads(SCENARIO.read_text())["end_ms"] // 1000
    assert "rolling-restart-new (simulated)" in err
    assert f"{end_s}/{end_s}" in err and "100%" in err
    assert ELAPSED.search(err), err


@pytest.mark.parametrize("quiet", [(), ("-q",)], ids=["piped", "quiet-terminal"])
def test_drill_run_prints_no_progress_when_piped_or_quiet(tmp_path: Path, quiet: tuple[str, ...]) -> None:
    rows = None if not quiet else 30
    code, out, err = run_cli(
        *quiet, "drill", "run", str(SCENARIO), "--out", str(tmp_path), rows=rows, cols=100
    )
    assert code == 0, err
    assert json.loads(out)["ok"] is True
    assert err == ""


@pytest.fixture
def stderr_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, IO[str]]]:
    """A 100-column pseudo-terminal, (master, slave file), and a test's ``sys.stderr`` on it once
    the test calls ``monkeypatch`` (pytest puts its own capture back on stderr after setup)."""
    master, slave = pty_pair(30, 100)
    terminal = os.fdopen(slave, "w", buffering=1)
    yield master, terminal
    terminal.close()
    os.close(master)


def test_stages_show_the_step_and_the_drills_done(
    stderr_terminal: tuple[int, IO[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``analyze`` and ``drill fleet`` report through ``progress(message, done=None)``."""
    master, terminal = stderr_terminal
    monkeypatch.setattr(sys, "stderr", terminal)
    screen: list[str] = []

    def shows(text: str) -> bool:
        screen.append(written_so_far(master))
        return text in "".join(screen)

    with progress.Bar("drill fleet", 40, unit=" drills") as bar:
        report = progress.StageReporter(bar)
        report("running 40 drills (seed 7)", done=0)
        report("running 40 drills (seed 7)", done=25)
        # Too soon after the last draw for tqdm: the bar's own redraw (once a second) shows it.
        wait_until(lambda: shows("25/40"), timeout=5.0, message="25/40 never drawn")
        report("drawing charts", done=40)
    terminal.flush()
    assert shows("40/40")
    err = "".join(screen)
    assert "drill fleet" in err
    assert "running 40 drills (seed 7)" in err and "drawing charts" in err
    assert ELAPSED.search(err)


def test_stages_without_a_total_show_elapsed_time_and_the_step(
    stderr_terminal: tuple[int, IO[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, terminal = stderr_terminal
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress.Bar("analyze") as bar:
        progress.StageReporter(bar)("computing metrics")
    terminal.flush()
    err = written_so_far(master)
    assert re.search(r"analyze \[\d\d:\d\d, computing metrics\]", err), err


def test_a_bar_is_inert_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Under pytest stderr is captured, not a terminal: no output, no ticking thread."""
    with progress.Bar("x", 3, enabled=True) as bar:
        assert not bar.shown and bar._ticker is None
        bar.update_to(3)
        bar.step("done")
    assert capsys.readouterr().err == ""


def test_a_disabled_bar_stays_quiet_on_a_terminal(
    stderr_terminal: tuple[int, IO[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    master, terminal = stderr_terminal
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress.Bar("x", 3, enabled=False) as bar:
        bar.update_to(3)
    terminal.flush()
    assert written_so_far(master) == ""


LIVE_SCENARIO = {
    "name": "live-progress",
    "timing": {
        "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 300,
        "scheduled_rebalance_max_delay_ms": 500,
    },
    "connectors": {"A": 2},
    "steps": [
        {"at_ms": 0, "action": "start", "worker": "w1", "protocol": "new"},
        {"at_ms": 800, "action": "add_connector", "connector": "B", "tasks": 1},
        {"at_ms": 1200, "action": "start", "worker": "w2", "protocol": "new"},
    ],
    "end_ms": 2500,
}


@pytest.mark.live
@pytest.mark.heavy
def test_a_live_drill_shows_its_steps(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(LIVE_SCENARIO))
    code, out, err = run_cli(
        "drill", "run", str(scenario), "--out", str(tmp_path / "out"), "--mode", "live", rows=30, cols=160
    )
    assert json.loads(out)["name"] == "live-progress", (code, err)
    assert "live-progress (live)" in err
    for shown in (
        "start w1 at 0 s",
        "add_connector B at 0.8 s",
        "start w2 at 1.2 s",
        "3/3",
        "until the end at 2.5 s",
    ):
        assert shown in err, (shown, err)
    assert ELAPSED.search(err)


@pytest.mark.parametrize(
    ("n", "noun", "plural", "shown"),
    [
        (1, "drill", "", "1 drill"),
        (0, "drill", "", "0 drills"),
        (2, "event log", "", "2 event logs"),
        (1_200, "adversarial drill", "", "1,200 adversarial drills"),
        (1, "Parquet input", "", "1 Parquet input"),
        (3, "child", "children", "3 children"),
    ],
)
def test_counts_read_as_english(n: int, noun: str, plural: str, shown: str) -> None:
    """Progress and summary lines say "1 drill", never "1 drills" (issue 14's audit)."""
    assert progress.counted(n, noun, plural) == shown


class _Lines(logging.Handler):
    """The progress logger's lines (its own handler: the CLI's logging setup may not propagate)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def progress_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.2")
    handler = _Lines()
    logger = logging.getLogger("connect_bridge.progress")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_off_a_terminal_long_work_says_each_step_and_at_a_steady_interval(progress_lines: list[str]) -> None:
    """Piped ``analyze``/``drill fleet``/live drill: a line per step, one per interval while a step
    lasts, one at the end; counts and an estimate of what is left when the total is known."""
    with progress.Bar("drill fleet", 200, unit=" drills", plain=True) as bar:
        assert not bar.shown and bar.plain
        report = progress.StageReporter(bar)
        report("starting Spark")
        assert progress_lines[-1] == "drill fleet: 0/200 drills (0%), 0 s elapsed: starting Spark"
        said = len(progress_lines)
        report("running the drills", done=50)
        wait_until(lambda: len(progress_lines) >= said + 3, timeout=10)  # the step, then the interval's
    running = progress_lines[said:]
    assert running[0].startswith("drill fleet: 50/200 drills (25%), 0 s elapsed, about ")
    assert running[0].endswith(" left: running the drills")
    assert all(line.startswith("drill fleet: 50/200 drills (25%)") for line in running[1:-1])
    assert re.fullmatch(r"drill fleet: 50/200 drills \(25%\), done in \d+ s", running[-1])


def test_off_a_terminal_short_work_and_failed_work_stay_as_they_were(progress_lines: list[str]) -> None:
    with progress.Bar("sim", 10) as bar:  # not plain: a simulated drill takes seconds
        bar.step("x")
    assert progress_lines == []
    with pytest.raises(RuntimeError), progress.Bar("analyze", plain=True) as bar:
        bar.step("reading")
        raise RuntimeError("boom")
    assert progress_lines == ["analyze: 0 s elapsed: reading"]  # no "done" line for work that failed
    with progress.Bar("analyze", plain=True, enabled=False) as bar:  # -q
        bar.step("reading")
    assert progress_lines == ["analyze: 0 s elapsed: reading"]


def test_a_clock_moves_the_count_and_the_eta_with_the_schedule(
    stderr_terminal: tuple[int, IO[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live drill's bar counts schedule seconds from its clock at every tick: the bar moves (and
    its ETA is the schedule's) while the drill waits for its next step."""
    master, terminal = stderr_terminal
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress, "TICK_S", 0.1)
    schedule = progress.ScheduleClock(600)
    with progress.Bar("live (live)", 600, unit="s", clock=schedule) as bar:
        assert bar.shown
        schedule.start()  # nothing else moves the bar: no step is told while the drill waits
        wait_until(lambda: bar.done >= 3, timeout=10)
        seen: list[str] = []

        def shown() -> bool:
            terminal.flush()
            seen.append(written_so_far(master))
            for done, minutes, seconds in re.findall(r"(\d+)/600 \[\d\d:\d\d<(\d\d):(\d\d)", "".join(seen)):
                if int(done) >= 3 and abs(int(minutes) * 60 + int(seconds) - (600 - int(done))) <= 15:
                    return True  # the ETA is the schedule's remaining time
            return False

        wait_until(shown, timeout=15, message=lambda: "".join(seen)[-300:])


def test_a_schedule_clock_starts_once_and_stops_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    clock = progress.ScheduleClock(600)
    assert clock() == 0  # before the bridge is up
    clock.start()
    now[0] += 42.5
    clock.start()  # a later step does not restart it
    assert clock() == 42
    now[0] += 10_000
    assert clock() == 600


@pytest.mark.live
@pytest.mark.heavy
def test_a_piped_live_drill_says_where_it_is_on_its_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal a live drill is no longer silent: a line per step and per interval, counted
    in schedule seconds, and a last one when it is done."""
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.5")
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(LIVE_SCENARIO))
    code, out, err = run_cli("drill", "run", str(scenario), "--out", str(tmp_path / "out"), "--mode", "live")
    assert json.loads(out)["name"] == "live-progress", (code, err)
    lines = [
        line.split(" connect_bridge.progress ", 1)[1]
        for line in err.splitlines()
        if " connect_bridge.progress " in line
    ]
    assert lines[0].startswith("live-progress (live): 0/2s (0%), "), lines
    assert any(line.endswith(": 1/3 steps, next: add_connector B at 0.8 s") for line in lines), lines
    assert any(line.endswith(": 3/3 steps, next: until the end at 2.5 s") for line in lines), lines
    assert re.fullmatch(r"live-progress \(live\): 2/2s \(100%\), done in \d+ s", lines[-1]), lines
