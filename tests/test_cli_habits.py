"""The habits an operator expects of a command (docs/cli.md): ``--version``, ``--log-level`` / ``-q``
/ ``-v`` before or after the sub-command, defaults in every ``--help``, documentation links that
work for a pip install."""

from __future__ import annotations

import argparse
import logging
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from connect_bridge.bridge.settings import BridgeSettings
from connect_bridge.cli import build_parser, doc_pages, main
from connect_bridge.logs import LEVELS, others_level

REPO = Path(__file__).resolve().parents[1]
CLI = (sys.executable, "-m", "connect_bridge.cli")


def command_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub-)command's parser with its path: ``()``, ``("serve",)``, ``("drill", "run")``..."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_parsers(sub, (*path, name))


COMMANDS = dict(command_parsers(build_parser()))


def flat(text: str) -> str:
    """Help text with argparse's line wrapping undone."""
    return " ".join(text.split())


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"connect-bridge {version('connect-bridge')}\n"


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "connect-bridge")
def test_every_help_works_and_states_its_defaults(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    text = flat(capsys.readouterr().out)
    assert text.startswith("usage: connect-bridge")
    defaults = [
        a
        for a in COMMANDS[path]._actions
        if a.default not in (None, argparse.SUPPRESS)
        and a.default is not False
        and not isinstance(a, argparse._StoreConstAction | argparse._HelpAction | argparse._VersionAction)
    ]
    for action in defaults:
        assert f"(default: {action.default})" in text, (action.dest, text)
    for action in COMMANDS[path]._actions:  # positionals and required options too, not only defaults
        if not isinstance(action, argparse._SubParsersAction):
            assert action.help, f"{' '.join(path)} {action.dest}: no help text"
    if path:  # the logging options are accepted after every command as well
        assert "--log-level LEVEL" in text and "(default: info)" in text


def test_serve_help_states_the_settings_defaults() -> None:
    """``serve``'s flags default to None (the config file may set them); the help must still say
    the default the bridge then uses, and it must be the settings' own."""
    fields = BridgeSettings.model_fields
    text = flat(COMMANDS[("serve",)].format_help())
    for flag, name in (
        ("--listen", "listen"),
        ("--state-dir", "state_dir"),
        ("--metrics-listen", "metrics_listen"),
    ):
        assert f"(default: {fields[name].default}, or the config file's)" in text, flag


def test_help_names_no_path_a_pip_install_lacks_and_links_pages_that_exist() -> None:
    """Help texts point at ``connect-bridge docs PAGE`` (pages shipped inside the package); a page
    named in an option's help (``serve.md below``) is one of those at the end of that help; every
    page pointed at ships."""
    shipped = doc_pages()
    repo_paths = re.compile(
        r"\b(docs|tests|examples|benchmarks|research|seeds|shared)/|DESIGN\.md|README\.md"
    )
    for path, parser in COMMANDS.items():
        text = parser.format_help()
        links = re.findall(r"connect-bridge docs ([\w-]+)", text)
        assert links, f"{path}: no documentation pointer"
        for page in links:
            assert page in shipped, f"{path}: {page} is not shipped"
        assert not repo_paths.search(text), f"{path}: {repo_paths.search(text)}"
        for page in re.findall(r"([\w-]+)\.md\b", text):
            assert page in links, f"{path}: names {page}.md but does not point at it"


def test_docs_lists_and_prints_the_shipped_pages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs"]) == 0
    listed = capsys.readouterr().out.split()
    assert "operator-guide" in listed and "serve" in listed
    assert sorted(listed) == sorted(p.name.removesuffix(".md") for p in (REPO / "docs").glob("*.md"))
    assert main(["docs", "operator-guide"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    assert main(["docs", "no-such-page"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("connect-bridge: no documentation page 'no-such-page'; pages:") and "serve" in err


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        ((), "info"),
        (("-q",), "warning"),
        (("-v",), "debug"),
        (("--log-level", "error"), "error"),
        (("--quiet", "--log-level", "debug"), "debug"),  # the last one given wins
    ],
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_logging_options_before_or_after_the_command(argv: tuple[str, ...], level: str, where: str) -> None:
    command = ("drill", "run", "x.json", "--out", "o")
    args = build_parser().parse_args([*argv, *command] if where == "before" else [*command, *argv])
    assert args.log_level == level


def test_an_option_after_the_command_overrides_the_one_before() -> None:
    args = build_parser().parse_args(["-v", "drill", "run", "x.json", "--out", "o", "-q"])
    assert args.log_level == "warning"


def test_codec_keeps_its_own_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    """``--version`` after ``codec`` is the protocol version, not the program's."""
    code = main(
        ["codec", "encode", "--kind", "subscription", "--version", "0", '{"url": "u", "config_offset": 1}']
    )
    assert code == 0
    assert capsys.readouterr().out.strip().startswith("0000")


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("debug", [(), ("--log-level", "debug"), ("-v",)], ids=["default", "log-level", "-v"])
def test_log_level_debug_enables_debug_logs(debug: tuple[str, ...], vectors: list[dict]) -> None:
    vector = next(v for v in vectors if v["kind"] == "subscription" and v.get("note") != "invalid")
    done = cli(*debug, "codec", "decode", "--kind", "subscription", vector["hex"])
    assert done.returncode == 0, done.stderr
    if debug:
        assert f"DEBUG connect_bridge.cli connect-bridge {version('connect-bridge')}" in done.stderr
    else:
        assert done.stderr == ""


def serve_stderr(tmp_path: Path, *options: str, after: tuple[str, ...] = ()) -> str:
    """Start ``serve`` embedded, wait for its listening line, stop it (SIGTERM): its stderr."""
    argv = [*options, "serve", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(
        [*CLI, *argv, "--metrics-listen", "off", *after],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the bridge listens (or exits)
        assert line.startswith("connect-bridge listening on "), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    return err


@pytest.mark.live
@pytest.mark.heavy
def test_quiet_silences_info_logs_of_serve(tmp_path: Path) -> None:
    assert " INFO connect_bridge.server listening on" in serve_stderr(tmp_path / "a")
    assert serve_stderr(tmp_path / "b", "-q") == ""
    assert serve_stderr(tmp_path / "c", after=("--log-level", "warning")) == ""


@pytest.mark.parametrize(
    ("level", "others"),
    [
        ("debug", logging.INFO),
        ("info", logging.WARNING),
        ("warning", logging.WARNING),
        ("error", logging.ERROR),
    ],
)
def test_other_libraries_log_their_warnings_and_only_with_v_their_info(level: str, others: int) -> None:
    assert others_level(LEVELS[level]) == others
