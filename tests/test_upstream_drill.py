"""The live drill in upstream mode: the bridge as a proxy in front of tansu (~15 s).

Same scenario shape as ``test_live_drill`` (a sessioned and a new worker, the sessioned one
restarted as new, a connector added, a SIGKILL-restart of the bridge), but the config steps are
Connect config-topic records on tansu, the bridge keeps its state on a compacted tansu topic, and
every worker bootstraps through the bridge's proxy listeners. ``check()`` must find every invariant.
"""

from __future__ import annotations

import json
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from connect_bridge.bridge.stores.config_topic import parse_config_records
from connect_bridge.drills.checker import check
from connect_bridge.drills.live import run_live
from connect_bridge.drills.scenario import load_scenario
from tansu import TansuBroker, tansu
from test_live_drill import SCENARIO as LIVE_SCENARIO
from test_live_drill import assert_upgrade_and_restart

__all__ = ["tansu"]  # the module's broker fixture, shared through tests/tansu.py

SCENARIO = {**LIVE_SCENARIO, "name": "upstream-upgrade-and-bridge-restart", "end_ms": 13000}


def topic_records(broker: TansuBroker, topic: str) -> list[tuple[bytes, bytes | None, int]]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[tuple[bytes, bytes | None, int]] = []
        empty = 0
        while empty < 3:
            batches = consumer.poll(300)
            empty = 0 if batches else empty + 1
            for batch in batches.values():
                out.extend((r.key, r.value, r.offset) for r in batch)
        return out
    finally:
        consumer.close()


def test_upstream_live_drill_passes(tansu: TansuBroker, tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    out = tmp_path / "out"

    log = run_live(scenario, out, upstream=tansu.bootstrap)

    events = log.events
    summary = check(events, name=scenario.name, end_ms=scenario.end_ms)
    bridge_log = (out / "bridge.log").read_text(errors="replace")
    assert summary.ok, (summary, bridge_log[-3000:])
    assert_upgrade_and_restart(events, scenario.end_ms)  # the config-topic step reached the bridge too

    # it really ran in proxy mode on tansu: config and state topics, no state directory in use
    settings = json.loads((out / "bridge.yaml").read_text())
    assert settings["upstream"] == [tansu.bootstrap]
    assert "file" not in settings["config_view"]
    assert "proxying 1 upstream brokers" in bridge_log
    config = topic_records(tansu, settings["config_view"]["topic"])
    view = parse_config_records(config)
    assert dict(view.connectors) == {"A": 2, "B": 1, "C": 2}
    configs = [e for e in events if e["type"] == "config"]
    assert [c["offset"] for c in configs] == [7, view.offset]  # Connect's offsets: last record + 1
    assert topic_records(tansu, settings["state_topic"]), "no state records on the state topic"
    assert not (out / "state").exists() or not any((out / "state").iterdir())
