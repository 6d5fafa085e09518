"""Every alert rule the project ships fires, under Prometheus' own ``promtool test rules``, on the
series a real bridge exports.

The rules are the operator guide's ``groups:`` block (docs/operator-guide.md, "Alerts") and any
Prometheus rules file under ``deploy/``. The series are not written by hand: a ``BridgeServer``
(the same ``Metrics`` registry ``/metrics`` renders) serves classic Connect workers over the wire
until its exposition holds what an operator's alerts look for: a classic group stuck in
``PreparingRebalance`` (every migration starts classic), heartbeats, a coordinator error
(``GROUP_MAX_SIZE_REACHED``). Each rule's selectors are matched against those series (names and
labels exactly as exported, plus the ``job``/``instance`` labels a scrape adds); a selector that
matches no exported series fails here, before promtool. The matched series then get the values of
:data:`FIRING` (a stuck state held, a counter climbing, slow histogram buckets) and promtool must
report the alert firing.

promtool comes from Debian's ``prometheus`` package (``.ci/run`` installs it); without it the
promtool test is skipped with a message saying so, the selector checks still run.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from connect_bridge.bridge.metrics import Metrics
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.config import CoordinatorConfig
from doc_commands import REPO, fenced_blocks
from test_server import (
    classic_group_of_two,
    connection,
    legacy_join,
    run,
    running,
)

GUIDE = REPO / "docs" / "operator-guide.md"
SCRAPE_LABELS = {"job": "connect-bridge", "instance": "bridge:9404"}
"""What Prometheus adds to every scraped series (the guide's scrape job is ``connect-bridge``)."""
STEPS = 60
"""Samples per input series, one a minute: longer than every rule's ``for`` plus its range."""

Values = Callable[[dict[str, str]], str]


def held(value: float) -> Values:
    """A gauge held at ``value`` for the whole test."""
    return lambda labels: f"{value:g}x{STEPS}"


def climbing(per_minute: int) -> Values:
    """A counter growing by ``per_minute`` every minute."""
    return lambda labels: f"0+{per_minute}x{STEPS}"


def slower_than(seconds: float) -> Values:
    """Histogram buckets where every observation took longer than ``seconds``: the buckets at or
    below it stay at 0, the ones above it grow by 10 a minute."""
    return lambda labels: f"0+10x{STEPS}" if float(labels["le"]) > seconds else f"0x{STEPS}"


FIRING: dict[str, dict[str, Values]] = {
    "ConnectBridgeDown": {"up": held(0)},
    "ConnectBridgeWorkersMissing": {"connect_bridge_group_members": held(1)},
    "ConnectBridgeRebalancing": {"connect_bridge_rebalances_total": climbing(2)},
    "ConnectBridgeMembersNotStable": {"connect_bridge_group_members": held(1)},
    "ConnectBridgeSlowFsync": {"connect_bridge_record_store_fsync_seconds_bucket": slower_than(0.1)},
    "ConnectBridgeSlowHeartbeats": {"connect_bridge_request_latency_seconds_bucket": slower_than(1)},
    "ConnectBridgeCoordinatorErrors": {"connect_bridge_requests_total": climbing(1)},
    "ConnectBridgeConnectionsHigh": {"connect_bridge_connections": held(9000)},
}
"""Alert -> the values that make it fire, per series name it reads. Every shipped alert needs a row."""
BUILTIN = {"up": [{**SCRAPE_LABELS}]}
"""Series Prometheus makes itself (scrape health), not the bridge."""


@dataclass(frozen=True)
class Selector:
    """``name{label op "value", ...}`` from a rule's expression."""

    name: str
    matchers: tuple[tuple[str, str, str], ...]

    def matches(self, labels: dict[str, str]) -> bool:
        for label, op, value in self.matchers:
            actual = labels.get(label, "")
            hit = re.fullmatch(value, actual) is not None if "~" in op else actual == value
            if hit == op.startswith("!"):
                return False
        return True


def selectors(expr: str) -> list[Selector]:
    """The series selectors of a PromQL expression (names the bridge or Prometheus exports)."""
    found = []
    for match in re.finditer(r"\b([a-z_:][a-z0-9_:]*)\s*(\{[^}]*\})?", re.sub(r"\[[^]]*\]", "", expr)):
        name, braces = match.groups()
        if name.startswith("connect_bridge_") or name in BUILTIN:
            pairs = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', braces or "")
            found.append(Selector(name, tuple(pairs)))
    return found


def shipped_rules() -> list[dict]:
    """Every alert rule of the guide's rules block and of rules files under deploy/."""
    docs = [b.body for b in fenced_blocks(GUIDE.read_text(encoding="utf-8")) if b.body.startswith("groups:")]
    docs += [p.read_text(encoding="utf-8") for p in sorted((REPO / "deploy").rglob("*.y*ml"))]
    rules = []
    for text in docs:
        loaded = yaml.safe_load(text)
        if isinstance(loaded, dict) and "groups" in loaded:
            rules += [rule for group in loaded["groups"] for rule in group["rules"] if "alert" in rule]
    return rules


def exported_series(exposition: str) -> dict[str, list[dict[str, str]]]:
    """Series name -> label sets, as a scrape of ``exposition`` stores them (scrape labels added)."""
    series: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            series.setdefault(sample.name, []).append({**sample.labels, **SCRAPE_LABELS})
    return series


async def classic_workers_in_trouble(port: int) -> None:
    """Classic Connect workers at a bridge whose ``max_group_size`` is 2: two form a group, a third
    is refused (GROUP_MAX_SIZE_REACHED), then the leader rejoins and the group waits in
    PreparingRebalance for the follower, which never comes. Returns while it waits."""
    w1, _, _ = await classic_group_of_two(port)
    async with connection(port, "legacy-3") as c3, connection(port, "legacy-1b") as c1:
        refused = await legacy_join(c3, "", "http://w3:8083")
        assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED, refused
        rejoin = asyncio.ensure_future(legacy_join(c1, w1, "http://w1:8083/changed"))
        await asyncio.sleep(0.2)
        assert not rejoin.done(), "the group should wait for the follower"
        rejoin.cancel()


@pytest.fixture(scope="module")
def exposition() -> Iterator[str]:
    metrics = Metrics()
    config = CoordinatorConfig(classic_initial_rebalance_delay_ms=0, max_group_size=2)
    with running(metrics=metrics, coordinator=config) as srv:
        run(classic_workers_in_trouble(srv.port))
        yield metrics.render().decode()


def input_series(rule: dict, exported: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    """promtool ``input_series`` for one rule: every exported series its selectors match, valued
    by :data:`FIRING`. A selector matching nothing the bridge exports is an error."""
    out: dict[str, dict[str, str]] = {}
    for selector in selectors(str(rule["expr"])):
        candidates = BUILTIN.get(selector.name) or exported.get(selector.name, [])
        chosen = [labels for labels in candidates if selector.matches(labels)]
        assert chosen, (
            f"{rule['alert']}: {selector.name}{dict((k, v) for k, _, v in selector.matchers)} matches no "
            f"series the bridge exports; it has {sorted({str(sorted(c.items())) for c in candidates})[:8]}"
        )
        values = FIRING[rule["alert"]][selector.name]
        for labels in chosen:
            text = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
            out[selector.name + text] = {"series": selector.name + text, "values": values(labels)}
    return list(out.values())


def test_every_shipped_alert_has_firing_values() -> None:
    names = [rule["alert"] for rule in shipped_rules()]
    assert names and len(names) == len(set(names))
    assert set(names) == FIRING.keys(), "an alert without a FIRING row, or a row without an alert"
    for rule in shipped_rules():
        read = {s.name for s in selectors(str(rule["expr"]))}
        assert read == FIRING[rule["alert"]].keys(), (rule["alert"], read)


def test_the_bridge_exports_a_classic_group_state(exposition: str) -> None:
    """Classic groups' members carry the group's state as Kafka names it, so a rebalance that
    never completes is visible (it used to be ``state=""``)."""
    members = exported_series(exposition)["connect_bridge_group_members"]
    assert [m["state"] for m in members if m["protocol"] == "classic"] == ["PreparingRebalance"], members


def test_every_alert_selects_series_the_bridge_exports(exposition: str) -> None:
    exported = exported_series(exposition)
    for rule in shipped_rules():
        assert input_series(rule, exported)


@pytest.mark.heavy
def test_promtool_fires_every_alert_on_the_exported_series(exposition: str, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run installs it)")
    exported = exported_series(exposition)
    rules = shipped_rules()
    rules_file = tmp_path / "rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "shipped", "rules": rules}]}), encoding="utf-8")
    longest = max(_minutes(str(rule.get("for", "0m"))) for rule in rules)
    cases = []
    for rule in rules:
        firing = f'count by (alertname) (ALERTS{{alertname="{rule["alert"]}",alertstate="firing"}}) > bool 0'
        cases.append(
            {
                "name": rule["alert"],
                "interval": "1m",
                "input_series": input_series(rule, exported),
                "promql_expr_test": [
                    {
                        "expr": firing,
                        "eval_time": f"{longest + 20}m",
                        "exp_samples": [{"labels": f'{{alertname="{rule["alert"]}"}}', "value": 1}],
                    }
                ],
            }
        )
    assert longest + 20 < STEPS
    tests_file = tmp_path / "tests.yml"
    tests_file.write_text(
        yaml.safe_dump({"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": cases}),
        encoding="utf-8",
    )
    command = [promtool, "test", "rules", tests_file.name]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def _minutes(duration: str) -> int:
    """A rule's ``for`` (``10m``, ``1h``, ``30s``) in whole minutes, rounded up."""
    number, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()  # type: ignore[union-attr]
    return math.ceil(int(number) * {"s": 1 / 60, "m": 1, "h": 60}[unit])
