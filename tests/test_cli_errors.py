"""Everyday failures of the ``connect-bridge`` CLI: one ``connect-bridge: ...`` line on stderr that
says what is wrong and what to do, a non-zero exit, never a traceback.

What needs a process (``serve`` with a port taken, a locked state directory, an upstream that
refuses) runs the real CLI as a subprocess (the ``cli_process`` fixture, which marks the test
``live``/``heavy``); the rest calls ``cli.main`` in-process, which is the same code.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from connect_bridge import cli
from connect_bridge.bridge.startup import backoff
from tansu import free_port
from test_serve_cli import PREFIX, Serve

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "crash-no-return-new.json"
HOST = "127.0.0.1"

Runner = Callable[..., subprocess.CompletedProcess[str]]


def one_error_line(err: str, *fragments: str, logs: bool = False) -> str:
    """The single ``connect-bridge:`` line of ``err``, checked to hold every fragment; nothing else
    on stderr unless ``logs`` (a ``serve`` that logged its retries first); never a traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("connect-bridge:")]
    assert len(lines) == 1, err
    assert logs or len(err.splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="session")
def cli_process() -> Runner:
    """Run ``connect-bridge ARGS...`` (the real CLI, as ``python -m``) to completion."""

    def run(*argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "connect_bridge.cli", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="module")
def running_bridge(
    cli_process: Runner, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Serve, Path]]:
    """One embedded ``connect-bridge serve`` and its state directory, for the tests that need a
    bridge to be there."""
    tmp = tmp_path_factory.mktemp("bridge")
    bridge = Serve(tmp / "state", tmp / "serve.log")
    try:
        yield bridge, tmp / "state"
    finally:
        bridge.close()


def an_event_log(tmp_path: Path) -> str:
    """An input ``analyze`` accepts (it is never read: ``--out`` is refused before Spark starts)."""
    log = tmp_path / "events.jsonl"
    log.write_text("")
    return str(log)


def serve_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["serve", "--state-dir", str(tmp_path / "state"), *extra]


# --------------------------------------------------------------------------- serve: start failures
def test_listen_port_in_use(cli_process: Runner, tmp_path: Path) -> None:
    with socket.create_server((HOST, 0)) as taken:
        port = taken.getsockname()[1]
        done = cli_process(*serve_args(tmp_path, "--listen", f"{HOST}:{port}", "--metrics-listen", "off"))
    assert done.returncode == 1
    assert PREFIX not in done.stdout
    one_error_line(
        done.stderr, f"cannot start: cannot listen on {HOST}:{port}: Address already in use", "--listen"
    )


def test_metrics_port_in_use_is_found_before_listening_is_announced(
    cli_process: Runner, tmp_path: Path
) -> None:
    with socket.create_server((HOST, 0)) as taken:
        port = taken.getsockname()[1]
        args = serve_args(tmp_path, "--listen", f"{HOST}:0", "--metrics-listen", f"{HOST}:{port}")
        done = cli_process(*args)
    assert done.returncode == 1
    assert PREFIX not in done.stdout, done.stdout
    one_error_line(
        done.stderr,
        f"cannot start: cannot serve metrics on {HOST}:{port}: Address already in use",
        "--metrics-listen",
    )


def test_a_locked_state_directory_names_the_bridge_holding_it(
    cli_process: Runner, running_bridge: tuple[Serve, Path]
) -> None:
    bridge, state = running_bridge
    done = cli_process("serve", "--state-dir", str(state), "--listen", f"{HOST}:0", "--metrics-listen", "off")
    assert done.returncode == 1
    assert PREFIX not in done.stdout
    one_error_line(
        done.stderr,
        f"state directory {state} is locked by another bridge (pid {bridge.proc.pid})",
        "--state-dir",
    )
    assert bridge.proc.poll() is None  # the holder is untouched


def test_an_unreachable_upstream_is_retried_then_given_up(cli_process: Runner, tmp_path: Path) -> None:
    config = tmp_path / "bridge.yaml"
    config.write_text("upstream_start_timeout_ms: 2500\nmetrics_listen: off\n")
    upstream = f"{HOST}:{free_port()}"  # nothing listens there: refused at once
    args = serve_args(tmp_path, "--config", str(config), "--listen", f"{HOST}:0", "--upstream", upstream)
    done = cli_process(*args)
    assert done.returncode == 1
    assert PREFIX not in done.stdout
    retries = [line for line in done.stderr.splitlines() if "retrying in" in line]
    # 2.5 s of backoff (1 s, then 1.5 s left of the 2 s step): two retries, three attempts
    assert len(retries) == 2, done.stderr
    assert f"upstream {upstream} unreachable (Connection refused), retrying in 1 s (attempt 2;" in retries[0]
    assert re.search(r"retrying in 1\.\d+ s \(attempt 3;", retries[1]), retries[1]
    one_error_line(
        done.stderr,
        f"cannot start: upstream {upstream} unreachable (Connection refused) after 3 attempts in 2.5 s",
        "upstream_start_timeout_ms",
        logs=True,
    )


def test_a_state_directory_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.write_text("not a directory")
    argv = ("serve", "--state-dir", str(state), "--listen", f"{HOST}:0", "--metrics-listen", "off")
    code, out, err = in_process(capsys, *argv)
    assert (code, out) == (1, "")
    one_error_line(
        err,
        f"cannot start: state directory {state} cannot be used: it is a file, not a directory",
        "--state-dir",
    )


def test_backoff_doubles_up_to_ten_seconds() -> None:
    delays = backoff()
    assert [next(delays) for _ in range(7)] == [1, 2, 4, 8, 10, 10, 10]


# --------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--upstream", "kafka-1"], ["command line: upstream[0]: expected HOST:PORT", "'kafka-1'"]),
        (["--upstream", ""], ["command line: upstream: expected HOST:PORT[,HOST:PORT...], got ''"]),
        (["--upstream", "k:9092,k2:0"], ["upstream[1]: port must be in 1..65535, got 0"]),
        (["--listen", "localhost"], ["command line: listen: expected HOST:PORT", "'localhost'"]),
        (["--listen", "h:70000"], ["command line: listen: port must be in 0..65535, got 70000"]),
        (["--metrics-listen", "9404"], ["command line: metrics_listen: expected HOST:PORT"]),
    ],
)
def test_malformed_addresses(
    argv: list[str], fragments: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = in_process(capsys, *serve_args(tmp_path, *argv))
    assert (code, out) == (1, "")
    one_error_line(err, *fragments)
    assert not (tmp_path / "state").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("yaml", "fragments"),
    [
        ("config_view: {topic: connect-configs}\n", ["config_view.topic needs upstream", "config_view.file"]),
        ("state_topic: bridge-state\n", ["state_topic needs upstream", "state_dir"]),
    ],
)
def test_topics_without_an_upstream(
    yaml: str, fragments: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bridge.yaml"
    config.write_text(yaml)
    code, out, err = in_process(capsys, "serve", "--config", str(config))
    assert (code, out) == (1, "")
    one_error_line(err, f"{config}: (top level): ", *fragments)


# --------------------------------------------------------------------------- describe
@pytest.mark.parametrize("bootstrap", ["bridge", "bridge:port", "[::1]", ":9092"])
def test_malformed_bootstrap(bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = in_process(capsys, "describe", "--bootstrap", bootstrap)
    assert (code, out) == (1, "")
    one_error_line(err, "--bootstrap-server: expected HOST:PORT", repr(bootstrap))


def test_describe_with_no_bridge_there(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"{HOST}:{free_port()}"
    code, out, err = in_process(capsys, "describe", "--bootstrap", address)
    assert (code, out) == (1, "")
    one_error_line(err, f"cannot describe through {address}: Connection refused", "connect-bridge serve")


def test_describe_of_a_group_that_does_not_exist(
    running_bridge: tuple[Serve, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    address = running_bridge[0].address
    for json_flag in ([], ["--json"]):
        code, out, err = in_process(capsys, "describe", "--bootstrap", address, "no-such-group", *json_flag)
        assert (code, out) == (1, "")
        one_error_line(err, f"group 'no-such-group' not found on the bridge at {address}")


# --------------------------------------------------------------------------- codec
@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["decode", "--kind", "assignment", "000"], ["invalid hex input: 3 hex digits, an odd number"]),
        (["decode", "--kind", "subscription", "00 0 1 2"], ["5 hex digits, an odd number"]),
        (["decode", "--kind", "assignment", "zz"], ["invalid hex input: non-hexadecimal"]),
        (
            ["encode", "--kind", "assignment", "--version", "40000", "{}"],
            ["unknown 'version' 40000", "0 (default/eager), 1 (compatible), 2 (sessioned)"],
        ),
        (["encode", "--kind", "subscription", "--version", "-2", "{}"], ["unknown 'version' -2", "3..32767"]),
        (["encode", "--kind", "subscription", "{}"], ["needs --version N: 0 (default/eager)"]),
    ],
)
def test_codec_input(argv: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = in_process(capsys, "codec", *argv)
    assert (code, out) == (1, "")
    one_error_line(err, *fragments)


# --------------------------------------------------------------------------- --out
def test_out_rules_of_drill_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """New: created. Empty: used. Non-empty: refused, unless --force. A file: refused."""
    new = tmp_path / "a" / "b"
    assert in_process(capsys, "drill", "run", str(EXAMPLE), "--out", str(new), "-q")[0] == 0
    assert (new / "summary.json").exists()

    code, out, err = in_process(capsys, "drill", "run", str(EXAMPLE), "--out", str(new))
    assert (code, out) == (1, "")
    one_error_line(err, f"--out {new} is not empty", "--force")

    (new / "notes.txt").write_text("mine")
    (new / "summary.json").write_text("{}")
    assert in_process(capsys, "drill", "run", str(EXAMPLE), "--out", str(new), "--force", "-q")[0] == 0
    assert json.loads((new / "summary.json").read_text())["name"]  # replaced
    assert (new / "notes.txt").read_text() == "mine"  # --force deletes nothing

    empty = tmp_path / "empty"
    empty.mkdir()
    assert in_process(capsys, "drill", "run", str(EXAMPLE), "--out", str(empty), "-q")[0] == 0


@pytest.mark.parametrize(
    "command",
    [
        ["drill", "run", str(EXAMPLE)],
        ["drill", "fleet", "--count", "2"],
        ["drill", "search", "--count", "2"],
        ["analyze", "LOG"],
    ],
    ids=["drill run", "drill fleet", "drill search", "analyze"],
)
def test_an_out_that_cannot_be_written_is_refused_before_any_work(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    command = [an_event_log(tmp_path) if arg == "LOG" else arg for arg in command]
    for out, fragment in (
        (a_file, f"--out {a_file} exists and is not a directory"),
        (a_file / "sub", f"--out {a_file / 'sub'} cannot be created: Not a directory"),
    ):
        code, stdout, err = in_process(capsys, *command, "--out", str(out))
        assert (code, stdout) == (1, ""), err
        one_error_line(err, fragment, "choose another directory" if "created" in fragment else "directory")


def test_non_empty_out_is_refused_by_fleet_and_analyze_but_collected_into_by_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "old.json").write_text("{}")
    for command in (["drill", "fleet", "--count", "2"], ["analyze", an_event_log(tmp_path)]):
        code, out, err = in_process(capsys, *command, "--out", str(used))
        assert (code, out) == (1, ""), err
        one_error_line(err, f"--out {used} is not empty", "--force")
    # search adds minimized scenarios to a regressions directory: one seed, no failure expected
    code, out, err = in_process(capsys, "drill", "search", "--count", "1", "--out", str(used))
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["drills"] == 1


# --------------------------------------------------------------------------- scenarios
def test_every_scenario_error_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(EXAMPLE.read_text())
    doc["tmeout"] = 1
    doc["steps"][0]["action"] = "explode"
    del doc["end_ms"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = in_process(capsys, "drill", "run", str(path), "--out", str(tmp_path / "out"))
    assert (code, out) == (1, "")
    line = one_error_line(err, f"{path}: 3 errors: ", "unknown action 'explode'", "'tmeout'", "end_ms")
    assert "more" not in line
    assert not (tmp_path / "out").exists()  # refused before --out was touched


# --------------------------------------------------------------------------- the safety net
def test_an_unexpected_exception_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the simulator\nbroke")

    monkeypatch.setattr("connect_bridge.drills.sim.run_scenario", broken)
    argv = ("drill", "run", str(EXAMPLE), "--out", str(tmp_path / "out"))
    code, out, err = in_process(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        "connect-bridge: internal error: RuntimeError: the simulator broke "
        "(run with --log-level debug for the traceback)"
    ]
    code, out, err = in_process(capsys, *argv, "--force", "--log-level", "debug")
    assert code == 2
    assert "Traceback" in err and 'raise RuntimeError("the simulator' in err  # asked for: shown


def test_ctrl_c_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("connect_bridge.drills.sim.run_scenario", interrupted)
    code, out, err = in_process(capsys, "drill", "run", str(EXAMPLE), "--out", str(tmp_path / "out"))
    assert (code, out, err) == (130, "", "connect-bridge: interrupted\n")


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``connect-bridge docs operator-guide | head -1``: the pipe closes under the writer. That is
    the reader's choice, not a failure: no traceback, no internal-error line, exit 141 (128 +
    SIGPIPE, what a shell reports for such a writer)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "connect_bridge.cli", "docs", "operator-guide"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the interpreter has started: every write finds the pipe closed
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141
    assert err == ""
