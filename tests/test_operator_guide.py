"""Every command of ``docs/operator-guide.md`` works as written.

The guide's plain ```sh blocks are run in document order against real parts: a tansu broker as the
upstream cluster, ``connect-bridge serve`` as a process (the block that starts it is left running
until the end), and two new-protocol workers (``workers/live_new.py``, the guide's reference worker)
that join once the bridge is up, standing in for the operator's workers. The guide's host names,
ports and paths are replaced by the explicit table in :func:`substitutions`; every entry must be
used, so a guide edit cannot leave the table stale, and no placeholder may survive it.

Blocks whose fence names a section (```sh adoption) need a setting of their own and are run by the
test of :data:`SECTION_TESTS`; this module checks that no such tag goes unclaimed.

Blocks that are not commands use another fence language and are checked for what they claim: the
worker ``properties`` excerpt must agree with the ``bridge.yaml`` the guide writes, and the
Prometheus rules (``yaml``) must parse and name only metrics the running bridge exposes, with label
values the bridge can produce. Assertions are on exit codes and stable content (group id, member
counts, ``--json`` fields), not on table layout.
"""

from __future__ import annotations

import asyncio
import re
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka.admin import KafkaAdminClient

from connect_bridge.bridge.coordination.api_table import API_NAMES
from connect_bridge.bridge.describe import describe
from connect_bridge.codecs.error_codes import error_name
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.model import MemberState
from doc_commands import (
    REPO,
    Block,
    Serve,
    Workers,
    count_fences,
    fenced_blocks,
    last_json,
    run_sh,
    substitute,
    workers,
)
from polling import wait_until
from tansu import TansuBroker, free_port, tansu

__all__ = ["tansu", "workers"]  # re-exported fixtures

GUIDE = REPO / "docs" / "operator-guide.md"
CHECKED_LANGUAGES = {"sh", "properties", "yaml"}
PLACEHOLDERS = (
    "example.internal",
    "broker1",
    "broker2",
    "/etc/",
    "/var/",
    "0.0.0.0",
    "localhost",
    "journalctl",
)
WORKERS = 2
PROMETHEUS_BUILTINS = {"up"}
"""Series Prometheus makes itself (the scrape health of the /metrics target), not the bridge."""
PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "le", "api", "group", "job"}
PROMQL_WORDS |= {"state", "error"}
SECTION_TESTS = {
    "credentials": "tests/test_operator_guide_sections.py::test_credentials_commands",
    "cluster": "tests/test_operator_guide_sections.py::test_cluster_commands",
    "adoption": "tests/test_operator_guide_sections.py::test_adoption_commands",
    "ha": "tests/test_ha.py::test_find_coordinator_names_the_owner_and_other_bridges_refuse",
}
"""Tag of a guide block -> the test that runs that section's commands."""


def substitutions(
    tmp: Path, broker: TansuBroker, listen: int, metrics: int, base: int
) -> list[tuple[str, str]]:
    """Guide value -> test value, applied in this order (one containing another comes first)."""
    return [
        ("/etc/connect-bridge", str(tmp / "etc-connect-bridge")),
        ("/var/lib/connect-bridge", str(tmp / "state")),
        ("/var/backups", str(tmp / "backups")),
        ("/tmp/rehearsal", str(tmp / "rehearsal")),
        ("bridge-1.example.internal:9092", f"127.0.0.1:{listen}"),
        ("bridge-1.example.internal", "127.0.0.1"),
        ('"0.0.0.0:9092"', f'"127.0.0.1:{listen}"'),
        ('"0.0.0.0:9404"', f'"127.0.0.1:{metrics}"'),
        ("localhost:9404", f"127.0.0.1:{metrics}"),
        ("broker1:9092", broker.bootstrap),
        ("broker2:9092", broker.bootstrap),
        ("proxy_base_port: 19092", f"proxy_base_port: {base}"),
        # systemd's journal is the bridge's stderr, which the test writes to a file
        ("journalctl -u connect-bridge -o cat", f"cat {tmp / 'bridge.log'}"),
    ]


def properties(body: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in body.splitlines() if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def upstream_node_id(broker: TansuBroker) -> int:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (node,) = admin.describe_cluster()["brokers"]
        return int(node["broker_id"])
    finally:
        admin.close()


def group_state(port: int, group: str) -> str:
    """The group's state as ``connect-bridge describe`` reads it (the guide calls STABLE healthy)."""
    (described,) = asyncio.run(describe("127.0.0.1", port, group))
    return str(described["state"])


def check_worker_properties(worker: dict[str, str], settings: dict[str, Any], listening: str) -> None:
    """The worker excerpt agrees with the bridge.yaml the guide writes (docs/real-kafka.md: the
    scheduled delays must be equal; the group and config topic are the bridge's config view), and
    sends the tasks' clients to the brokers the bridge fronts (coordination only, docs/upstream.md)."""
    assert worker["bootstrap.servers"] == listening, (worker, listening)
    for prefix in ("producer", "consumer", "admin"):
        assert worker[f"{prefix}.bootstrap.servers"].split(",") == settings["upstream"], (prefix, worker)
    assert worker["group.id"] == settings["config_view"]["group"]
    assert worker["config.storage.topic"] == settings["config_view"]["topic"]
    bridge_delay = settings["coordinator"]["scheduled_rebalance_max_delay_ms"]
    assert int(worker["scheduled.rebalance.max.delay.ms"]) == bridge_delay


def metric_names(exposition: str) -> set[str]:
    """Every series name a Prometheus scrape of this text can have (histogram and counter suffixes)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter":
                names |= {name.removesuffix("_total") + "_total", name.removesuffix("_total") + "_created"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def check_alert_rules(rules_yaml: str, exposition: str) -> None:
    """The rules parse, and name only series the bridge exposes and label values it can produce."""
    doc = yaml.safe_load(rules_yaml)
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    assert rules and all({"alert", "expr", "for", "annotations"} <= rule.keys() for rule in rules), rules
    exposed = metric_names(exposition)
    allowed_values = {
        "state": {s.value for s in MemberState} | {s.value for s in ClassicGroupState},
        "api": set(API_NAMES.values()),
        "error": {error_name(code) for code in range(-1, 200)},
    }
    for rule in rules:
        expr = str(rule["expr"])
        words = set(re.findall(r"\b[a-z_][a-z0-9_]*\b", re.sub(r'"[^"]*"|\[[^]]*\]', "", expr)))
        metrics = {w for w in words if w.startswith("connect_bridge_")} | (words & PROMETHEUS_BUILTINS)
        assert metrics, (rule["alert"], expr)
        assert metrics - PROMETHEUS_BUILTINS <= exposed, (rule["alert"], metrics - exposed)
        assert words - metrics <= PROMQL_WORDS, (rule["alert"], words - metrics - PROMQL_WORDS)
        for label, values in re.findall(r'(\w+)=~?"([^"]*)"', expr):
            if label in allowed_values:
                assert set(values.split("|")) <= allowed_values[label], (rule["alert"], label, values)


def check_output(body: str, out: str, group: str, tmp: Path) -> None:
    """Stable content of what a block printed."""
    if "/readyz" in body:
        assert out.strip() == "ready"
    if "describe" in body:
        assert group in out
    if "describe" in body and "| jq" in body:
        summary = last_json(out)
        assert summary["group_id"] == group and summary["members"] == WORKERS, summary
        assert summary["group_type"] == "connect" and summary["state"] == "STABLE", summary
    if "/metrics" in body:
        members = [line for line in out.splitlines() if line.startswith("connect_bridge_group_members{")]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in members if f'group="{group}"' in line) == WORKERS
    if '"event"' in body:
        assert f'"event":"member_metadata","group":"{group}"' in out
    if "summary.json" in body:
        assert last_json(out)["ok"] is True
    if "tar " in body:
        with tarfile.open(tmp / "backups" / "connect-bridge-state.tgz") as archive:
            assert any(member.isfile() and member.size > 0 for member in archive.getmembers())


@pytest.mark.live  # a serve process and live workers; tansu makes it broker + heavy (tests/conftest.py)
def test_operator_guide_commands(tansu: TansuBroker, workers: Workers, tmp_path: Path) -> None:
    blocks = [b for b in fenced_blocks(GUIDE.read_text(encoding="utf-8")) if not b.tag]
    assert {b.lang for b in blocks} <= CHECKED_LANGUAGES, "a fence language this test does not check"
    listen, metrics, relay = free_port(), free_port(), free_port()
    table = substitutions(tmp_path, tansu, listen, metrics, relay - upstream_node_id(tansu))
    used: set[str] = set()
    adapted = [Block(b.lang, substitute(b.body, table, used), b.line) for b in blocks]
    for block in adapted:
        leftovers = [p for p in PLACEHOLDERS if p in block.body]
        assert not leftovers, f"guide line {block.line}: {leftovers} not in the substitution table"
    (props_block,) = [b for b in adapted if b.lang == "properties"]
    worker = properties(props_block.body)
    (rules_block,) = [b for b in adapted if b.lang == "yaml" and b.body.startswith("groups:")]
    group = worker["group.id"]

    bridge: Serve | None = None
    try:
        for block in (b for b in adapted if b.lang == "sh"):
            if "connect-bridge serve" in block.body:
                bridge = Serve(block.body, tmp_path / "bridge.log")
                settings = yaml.safe_load((tmp_path / "etc-connect-bridge" / "bridge.yaml").read_text())
                check_worker_properties(worker, settings, bridge.address)
                workers.start(listen, group, WORKERS)
                wait_until(lambda: group_state(listen, group) == "STABLE", timeout=20, message="not STABLE")
                continue
            check_output(block.body, run_sh(block.body), group, tmp_path)
        assert bridge is not None, "the guide never starts the bridge"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as answer:
            check_alert_rules(rules_block.body, answer.read().decode())
    finally:
        if bridge is not None:
            assert bridge.stop() == 0, (tmp_path / "bridge.log").read_text()[-3000:]
    assert used == {old for old, _ in table}, f"unused substitutions: { ({o for o, _ in table} - used) }"


def test_guide_blocks_are_parsed() -> None:
    """The block parser sees every fence of the guide (an unclosed or odd fence would hide commands)."""
    text = GUIDE.read_text(encoding="utf-8")
    blocks = fenced_blocks(text)
    assert count_fences(text) == 2 * len(blocks)
    assert sum(b.lang == "sh" and not b.tag for b in blocks) >= 8
    tagged = {b.tag for b in blocks if b.tag}
    assert tagged == SECTION_TESTS.keys(), f"tags no test runs: {tagged - SECTION_TESTS.keys()}"
    for test in SECTION_TESTS.values():  # the named tests exist
        module, name = test.split("::")
        assert f"def {name}(" in (REPO / module).read_text(encoding="utf-8"), test
