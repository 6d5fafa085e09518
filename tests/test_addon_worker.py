"""Real Java Connect 4.3.1 workers with the connect-bridge-worker add-on (jvm/connect-bridge-worker)
through ``connect-bridge serve --upstream``: ``group.protocol=connect`` workers speak
ConnectGroupHeartbeat and run real connectors next to classic workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafka_fixtures import BridgeProcess, KafkaBroker
from kafka_workers import ConnectWorker
from test_java_drills import JavaDrill, group_type, wait_group_type


@pytest.fixture
def drill(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[JavaDrill]:
    name = request.node.name.removeprefix("test_").replace("_", "-")
    drill = JavaDrill(kafka_broker, connect_worker, bridge_proxy, tmp_path, name)
    yield drill
    drill.teardown()


def tasks_by_worker(worker: ConnectWorker, connector: str) -> dict[str, int]:
    """Worker id -> RUNNING tasks of ``connector``, from the REST status."""
    status = worker.connector_status(connector)
    out: dict[str, int] = {}
    for task in status["tasks"]:
        if task["state"] == "RUNNING":
            out[task["worker_id"]] = out.get(task["worker_id"], 0) + 1
    return out


def test_connect_worker_runs_tasks_next_to_a_classic_one(drill: JavaDrill) -> None:
    """A classic (stock) Java worker and a ``group.protocol=connect`` Java worker in one group: the
    group converts to ``connect`` when the new one joins, both run VerifiableSource tasks, and the
    group goes back to ``classic`` when the new one stops; the drill checker and the topic witness
    find no task run twice and none left unowned."""
    classic = drill.start("classic", group_protocol="classic")
    drill.create("alpha", 4, via="classic")
    drill.wait_running()
    assert group_type(drill) == "classic"
    new = drill.start("new", group_protocol="connect")
    assert "group.protocol=connect" in new.own_log()
    wait_group_type(drill, "connect", timeout_s=30)
    drill.wait_converged(timeout_s=75)
    drill.wait_running()
    owners = tasks_by_worker(classic, "alpha")
    assert set(owners) == {classic.worker_id, new.worker_id}, owners
    drill.stop("new")
    wait_group_type(drill, "classic", timeout_s=45)
    drill.wait_converged(timeout_s=75)
    drill.wait_running()
    assert set(tasks_by_worker(classic, "alpha")) == {classic.worker_id}
    drill.finish(timeout_s=75)
