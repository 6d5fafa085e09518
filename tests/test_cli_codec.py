"""``connect-bridge codec decode|encode`` (docs/cli.md) over every golden vector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.cli import main
from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.errors import CodecError

ENCODERS = {
    "subscription": (Subscription.from_json, encode_subscription),
    "assignment": (Assignment.from_json, encode_assignment),
}
ENCODABLE_NOTES = {None, "null-array", "missing-optional-fields"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0]


def test_decode_vector(connect_vector: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "codec", "decode", "--kind", connect_vector["kind"], connect_vector["hex"])
    if connect_vector.get("note") == "invalid":
        assert (code, out) == (1, "")
        field = {"err-asg-negative-version": "'version'", "err-asg-v2-partial-delay": "'delay'"}
        assert_one_error_line(err, field[connect_vector["id"]], "offset")
        return
    assert (code, err) == (0, "")
    assert json.loads(out) == connect_vector["input"]


def test_encode_vector(connect_vector: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    kind, version = connect_vector["kind"], connect_vector["version"]
    doc = json.dumps(connect_vector["input"], ensure_ascii=False)
    code, out, err = run(capsys, "codec", "encode", "--kind", kind, "--version", str(version), doc)
    if connect_vector.get("note") in ENCODABLE_NOTES:
        assert (code, err) == (0, "")
        assert out.strip() == connect_vector["hex"]
        return
    # Other vectors' bytes were altered by hand; the CLI must still agree with the library.
    from_json, encode = ENCODERS[kind]
    try:
        expected = encode(from_json(connect_vector["input"]), version).hex()
    except CodecError:
        assert (code, out) == (1, "")
        assert_one_error_line(err, "version")
        return
    assert (code, out.strip(), err) == (0, expected, "")


def test_decode_ignores_whitespace_in_hex(
    vectors: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    vector = next(v for v in vectors if v["id"] == "asg-v1-many")
    spaced = " ".join(vector["hex"][i : i + 8] for i in range(0, len(vector["hex"]), 8))
    code, out, _ = run(capsys, "codec", "decode", "--kind", "assignment", f"\n{spaced}\n")
    assert code == 0
    assert json.loads(out) == vector["input"]


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["decode", "--kind", "assignment", "zz"], ["invalid hex"]),
        (["decode", "--kind", "subscription", ""], ["'version'", "offset 0"]),
        (
            ["decode", "--kind", "subscription", "0001000161000000000000000100000010"],
            ["'allocation'", "offset 13"],
        ),
        (
            [
                "decode",
                "--kind",
                "assignment",
                "0001000000016c0001750000000000000001ffffffff00000001000163fffffffe",
            ],
            ["'revoked[0].tasks'", "offset 29"],
        ),
        (["encode", "--kind", "assignment", '{"error": 0}'], ["--version"]),
        (["encode", "--kind", "assignment", "--version", "1", "{not json"], ["invalid JSON"]),
        (
            ["encode", "--kind", "subscription", "--version", "1", '{"url": "u", "config_offset": "1"}'],
            ["'config_offset'"],
        ),
        (
            [
                "encode",
                "--kind",
                "subscription",
                "--version",
                "0",
                '{"url": "u", "config_offset": 1, "allocation": {"error": 0, "leader": "", "leader_url": "", '
                '"config_offset": 0}}',
            ],
            ["'allocation'", "version 0"],
        ),
        (
            [
                "encode",
                "--kind",
                "assignment",
                "--version",
                "-1",
                '{"error": 0, "leader": "", "leader_url": "", "config_offset": 0}',
            ],
            ["'version'"],
        ),
    ],
)
def test_failures_are_one_stderr_line(
    argv: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "codec", *argv)
    assert (code, out) == (1, "")
    assert_one_error_line(err, *fragments)


def _console_command() -> list[str]:
    script = Path(sys.executable).parent / "connect-bridge"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "connect_bridge.cli"]


def _run_console(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUTF8": "1"}
    return subprocess.run(
        [*_console_command(), *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=60,
        check=False,
    )


def test_installed_console_script(vectors: list[dict[str, Any]]) -> None:
    vector = next(v for v in vectors if v["id"] == "sub-v0-unicode-url")
    decoded = _run_console("codec", "decode", "--kind", "subscription", vector["hex"])
    assert (decoded.returncode, decoded.stderr) == (0, "")
    assert json.loads(decoded.stdout) == vector["input"]

    doc = json.dumps(vector["input"])
    encoded = _run_console("codec", "encode", "--kind", "subscription", "--version", "0", doc)
    assert (encoded.returncode, encoded.stdout.strip()) == (0, vector["hex"])

    failed = _run_console("codec", "decode", "--kind", "assignment", "ffff")
    assert failed.returncode == 1
    assert_one_error_line(failed.stderr, "'version'", "offset 0")
