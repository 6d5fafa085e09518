"""Every rebalance decision becomes one JSON log line naming the group, the member and the epoch."""

from __future__ import annotations

import json
import logging

import pytest

from connect_bridge.bridge.coordination.decisions import log_decisions
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView


def test_decisions_are_structured_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    coord = GroupCoordinator()
    coord.set_config("g", ConfigView.of(1, {"A": 1}), 0)
    resp = coord.connect_heartbeat(
        HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1000, url="http://w/"), 0
    )
    with caplog.at_level(logging.INFO, logger="connect_bridge.rebalance"):
        log_decisions(coord.drain_records())
    events = [json.loads(r.getMessage()) for r in caplog.records]
    kinds = {e["event"] for e in events}
    assert {"config_view", "group_epoch", "target_assignment", "member_assignment"} <= kinds
    assignment = [e for e in events if e["event"] == "member_assignment"][-1]
    assert assignment["group"] == "g" and assignment["member"] == resp.member_id
    assert assignment["assigned"] == ["A", "A-0"] and assignment["state"] == "STABLE"
    assert next(e for e in events if e["event"] == "group_epoch")["group"] == "g"
