"""``serve --check`` (validate without binding), the nearest valid key for a misspelled one, and a
failed ``serve`` that leaves no state directory of its own making behind (docs/serve.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from connect_bridge.bridge.settings import SettingsError, load_settings

CLI = (sys.executable, "-m", "connect_bridge.cli")


def serve(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "serve", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=os.environ
    )


@pytest.mark.parametrize(
    ("yaml", "expected"),
    [
        (
            "advertized_host: bridge.example\n",
            "advertized_host: unknown setting; did you mean advertised_host?",
        ),
        ("coordinator:\n  session_timeot_ms: 10\n", "did you mean session_timeout_ms?"),
        ("metrics-listen: off\n", "metrics-listen: unknown setting; did you mean metrics_listen?"),
        ("sasl:\n  mechanizms: [PLAIN]\n", "sasl.mechanizms: unknown setting; did you mean mechanisms?"),
        ("zzzz: 1\n", "zzzz: unknown setting"),
    ],
)
def test_a_misspelled_key_names_the_nearest_valid_one(tmp_path: Path, yaml: str, expected: str) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml)
    with pytest.raises(SettingsError) as error:
        load_settings(path)
    assert expected in str(error.value)
    if "did you mean" not in expected:
        assert "did you mean" not in str(error.value)


def test_a_misspelled_override_names_the_nearest_valid_one() -> None:
    with pytest.raises(
        SettingsError, match=r"no setting 'state_dri' in the top level; did you mean state_dir\?"
    ):
        load_settings(None, {"state_dri": "x"})


def test_check_validates_without_binding_or_creating(tmp_path: Path) -> None:
    with socket.socket() as taken:  # a start would fail on this port; --check binds nothing
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(
            tmp_path, "--check", "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{port}"
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and done.stdout.startswith("configuration ok: "), done.stdout
    assert f"listen 127.0.0.1:{port}" in done.stdout
    assert done.stderr == ""
    assert list(tmp_path.iterdir()) == []  # no ./state, no admin token


@pytest.mark.parametrize(
    ("args", "files", "expected"),
    [
        (
            ("--config", "bridge.yaml"),
            {"bridge.yaml": "listen: nowhere\n"},
            "connect-bridge: bridge.yaml: listen:",
        ),
        (
            ("--config", "bridge.yaml"),
            {"bridge.yaml": "tls:\n  certfile: missing.pem\n  keyfile: missing.key\n"},
            "connect-bridge: cannot start: TLS tls: certfile missing.pem",
        ),
    ],
)
def test_check_fails_as_a_start_would(
    tmp_path: Path, args: tuple[str, ...], files: dict[str, str], expected: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = serve(tmp_path, "--check", *args)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(expected) and done.stderr.count("\n") == 1, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)


def serve_with_its_metrics_port_taken(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``serve`` in ``tmp_path`` whose metrics listener cannot bind (the port is held open)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        return serve(tmp_path, "--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{port}")


def test_a_failed_serve_leaves_no_state_directory_it_created(tmp_path: Path) -> None:
    done = serve_with_its_metrics_port_taken(tmp_path)
    assert done.returncode == 1
    assert "cannot start" in done.stderr
    assert list(tmp_path.iterdir()) == []  # neither ./state nor its admin token


def test_a_failed_serve_keeps_a_state_directory_it_did_not_create(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "keep").write_text("operator's file\n")
    done = serve_with_its_metrics_port_taken(tmp_path)
    assert done.returncode == 1
    assert (state / "keep").read_text() == "operator's file\n"
