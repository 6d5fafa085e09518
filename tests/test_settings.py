"""``connect-bridge serve`` settings: defaults, YAML + overrides, one-line errors naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from connect_bridge.bridge.settings import (
    DEFAULT_MAX_FRAME_BYTES,
    BridgeSettings,
    SettingsError,
    example_yaml,
    load_settings,
    parse_host_port,
)
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy

DOCS = Path(__file__).resolve().parents[1] / "docs" / "serve.md"


def write(tmp_path: Path, text: str, name: str = "bridge.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path | None, overrides: dict | None = None) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(path, overrides or {})
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults() -> None:
    settings = load_settings(None, {})
    assert settings.listen == "127.0.0.1:9092"
    assert settings.listen_address == ("127.0.0.1", 9092)
    assert settings.advertised() == ("127.0.0.1", 9092)
    assert settings.state_dir == Path("state")
    assert settings.metrics_address == ("127.0.0.1", 9404)
    assert settings.max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 100 * 1024 * 1024
    assert settings.max_connections == 10000
    assert settings.idle_timeout_ms == 600000
    assert settings.config_view is None
    assert settings.upstream == []
    assert settings.coordinator.to_config() == CoordinatorConfig()


def test_yaml_file_and_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
listen: "0.0.0.0:19092"
advertised_host: bridge.example
state_dir: /var/lib/bridge
metrics_listen: off
coordinator:
  session_timeout_ms: 45000
  default_assignor: connect-eager
  migration_policy: upgrade
config_view:
  file: view.json
  group: cluster-a
upstream: ["kafka-1:9092", "[::1]:9093"]
""",
    )
    settings = load_settings(
        path,
        {
            "coordinator.session_timeout_ms": "30000",  # CLI strings are converted
            "listen": "0.0.0.0:29092",
            "config_view.poll_interval_ms": 250,
            "state_dir": None,  # "not given"
        },
    )
    assert settings.listen == "0.0.0.0:29092"
    assert settings.advertised() == ("bridge.example", 29092)
    assert settings.state_dir == Path("/var/lib/bridge")
    assert settings.metrics_listen is None
    config = settings.coordinator.to_config()
    assert config.session_timeout_ms == 30000
    assert config.default_assignor == "connect-eager"
    assert config.migration_policy is MigrationPolicy.UPGRADE
    assert config.heartbeat_interval_ms == CoordinatorConfig().heartbeat_interval_ms
    assert settings.config_view is not None
    assert settings.config_view.file == Path("view.json")
    assert settings.config_view.poll_interval_ms == 250
    assert settings.config_view.applies_to("cluster-a")
    assert not settings.config_view.applies_to("cluster-b")
    assert settings.upstream_addresses == [("kafka-1", 9092), ("::1", 9093)]


def test_the_workers_request_timeout_reaches_the_engine() -> None:
    """No request carries a worker's ``request.timeout.ms``; the engine's first session after a
    load must cover it (``holds.first_session_after_load_ms``), so the operator sets it here."""
    settings = load_settings(None, {"coordinator.worker_request_timeout_ms": "90000"})
    assert settings.coordinator.to_config().worker_request_timeout_ms == 90000
    assert CoordinatorConfig().worker_request_timeout_ms == 40000  # Connect's default
    with pytest.raises(SettingsError, match="worker_request_timeout_ms: Input should be greater than 0"):
        load_settings(None, {"coordinator.worker_request_timeout_ms": "0"})


def test_overrides_create_sections_and_split_upstream() -> None:
    settings = load_settings(None, {"config_view.file": "v.json", "upstream": "a:1, b:2"})
    assert settings.config_view is not None and settings.config_view.group is None
    assert settings.config_view.applies_to("anything")
    assert settings.upstream == ["a:1", "b:2"]


def test_advertised_defaults_follow_bound_port_and_hostname() -> None:
    settings = load_settings(None, {"listen": "0.0.0.0:0"})
    host, port = settings.advertised(bound_port=41234)
    assert port == 41234 and host not in ("0.0.0.0", "")
    assert load_settings(None, {"listen": "127.0.0.1:0", "advertised_port": 7}).advertised(5) == (
        "127.0.0.1",
        7,
    )


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "# nothing\n"), {}) == BridgeSettings()


def test_example_yaml_is_valid_and_matches_defaults() -> None:
    data = yaml.safe_load(example_yaml())
    settings = BridgeSettings.model_validate(data)
    assert settings.coordinator.to_config() == CoordinatorConfig()
    assert settings.model_dump(exclude={"config_view"}) == BridgeSettings().model_dump(
        exclude={"config_view"}
    )


def test_docs_embed_the_example() -> None:
    assert example_yaml() in DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "coordinator:\n  session_timeout_ms: 0\n",
            "bridge.yaml: coordinator.session_timeout_ms: Input should be greater than 0",
        ),
        ("listen: localhost\n", "bridge.yaml: listen: expected HOST:PORT"),
        ("listen: 'h:70000'\n", "bridge.yaml: listen: port must be in 0..65535, got 70000"),
        ("upstream: ['a:1', 'b:0']\n", "bridge.yaml: upstream[1]: port must be in 1..65535, got 0"),
        (
            "coordinator:\n  sesion_timeout_ms: 5\n",
            "bridge.yaml: coordinator.sesion_timeout_ms: unknown setting; did you mean session_timeout_ms?",
        ),
        (
            "coordinator:\n  default_assignor: range\n",
            "bridge.yaml: coordinator.default_assignor: Input should be",
        ),
        (
            "coordinator:\n  migration_policy: sideways\n",
            "bridge.yaml: coordinator.migration_policy: Input should be",
        ),
        (
            "coordinator:\n  heartbeat_interval_ms: 20000\n",
            "bridge.yaml: coordinator: heartbeat_interval_ms (20000) must be below",
        ),
        (
            "coordinator:\n  classic_min_session_timeout_ms: 9\n  classic_max_session_timeout_ms: 8\n",
            "bridge.yaml: coordinator: classic_min_session_timeout_ms (9) must not exceed",
        ),
        (
            "config_view:\n  group: g\n",
            "bridge.yaml: config_view: config_view needs exactly one of 'file' or 'topic'",
        ),
        (
            "config_view:\n  file: v.json\n  poll_interval_ms: 0\n",
            "bridge.yaml: config_view.poll_interval_ms: Input should be greater than 0",
        ),
        ("max_frame_bytes: -1\n", "bridge.yaml: max_frame_bytes: Input should be greater than 0"),
        ("max_connections: lots\n", "bridge.yaml: max_connections: Input should be a valid integer"),
        ("- listen\n", "bridge.yaml: the top level must be a mapping of settings, got list"),
        ("listen: [\n", "bridge.yaml: invalid YAML: line 2, column 1:"),
    ],
)
def test_file_errors_are_one_line_with_field_path(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    message = error_of(path)
    assert message.startswith(str(path)), message
    assert message.replace(str(path), "bridge.yaml").startswith(expected), message


def test_several_errors_share_the_line(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "max_connections: 0\nidle_timeout_ms: 0\n"))
    assert re.fullmatch(r".*max_connections: .*; .*idle_timeout_ms: .*", message)


def test_missing_file() -> None:
    assert (
        error_of(Path("/nonexistent/bridge.yaml"))
        == "/nonexistent/bridge.yaml: cannot read: No such file or directory"
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"coordinator.session_timeout_ms": "0"},
            "command line: coordinator.session_timeout_ms: Input should be greater than 0",
        ),
        ({"listen": "nope"}, "command line: listen: expected HOST:PORT"),
        ({"coordinator.nope": 1}, "command line: coordinator.nope: no setting 'nope' in coordinator"),
        ({"nope": 1}, "command line: nope: no setting 'nope' in the top level"),
        ({"listen.port": 1}, "command line: listen.port: listen is a value, not a section"),
    ],
)
def test_override_errors_name_the_command_line(overrides: dict, expected: str) -> None:
    assert error_of(None, overrides).startswith(expected)


def test_override_error_is_attributed_even_with_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: '127.0.0.1:1'\n")
    assert error_of(path, {"max_connections": "0"}).startswith("command line: max_connections:")
    assert error_of(path, {"coordinator.heartbeat_interval_ms": 99999}).startswith(
        f"{path} + command line: coordinator: heartbeat_interval_ms"
    )


def test_override_into_a_scalar_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "config_view: 5\n")
    assert (
        error_of(path, {"config_view.file": "x"})
        == "command line: config_view.file: config_view is not a section"
    )


@pytest.mark.parametrize("value", ["h", "h:", ":1", "h:p", "a b:1", "::1:9092", "[::1]:99999"])
def test_parse_host_port_rejects(value: str) -> None:
    with pytest.raises(ValueError):
        parse_host_port(value)


def test_parse_host_port_accepts() -> None:
    assert parse_host_port("[fe80::1]:9092") == ("fe80::1", 9092)
    assert parse_host_port("h:0", allow_zero_port=True) == ("h", 0)


def test_in_front_of_a_cluster_the_bridge_coordinates_the_config_view_group_only() -> None:
    """``connect.*`` would also capture sink connectors' consumer groups (docs/known-issues.md)."""
    from connect_bridge.bridge.app import coordinated_groups
    from connect_bridge.bridge.settings import BridgeSettings

    view = {"topic": "cfg", "group": "connect-cluster"}
    named = BridgeSettings(upstream=["127.0.0.1:9092"], config_view=view)
    assert coordinated_groups(named) == ["connect\\-cluster"]
    explicit = BridgeSettings(upstream=["127.0.0.1:9092"], coordinated_groups=["a.*"])
    assert coordinated_groups(explicit) == ["a.*"]
    assert coordinated_groups(BridgeSettings(upstream=["127.0.0.1:9092"])) is None  # connect.*, warned
    assert coordinated_groups(BridgeSettings()) is None  # embedded: every group
