"""The Connect REST helpers of ``kafka_workers`` against a scripted ``rest`` (no Java): the retries
an operator's script makes, and what they must not mistake for an error."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from kafka_workers import ConnectWorker, RestError

CONFIG = {"connector.class": "org.apache.kafka.connect.tools.VerifiableSinkConnector", "tasks.max": 1}


def scripted_worker(answers: list[Any], calls: list[tuple[str, str]]) -> ConnectWorker:
    """A ConnectWorker whose ``rest`` gives ``answers`` in turn (an exception is raised) and records
    each call; GET of the connector's config answers what was posted."""
    worker = ConnectWorker(subprocess.Popen(["true"]), Path("/dev/null"), None, rest_port=1)
    worker.process.wait()
    posted: dict[str, Any] = {}

    def rest(method: str, path: str, body: Any = None, timeout_s: float = 10.0) -> Any:
        calls.append((method, path))
        if method == "GET":
            return {**posted, "name": "sink"}
        posted.update(body["config"])
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    worker.rest = rest  # type: ignore[method-assign]
    return worker


def already_exists() -> RestError:
    body = {"error_code": 409, "message": "Connector sink already exists"}
    return RestError("POST", "http://w/connectors", 409, body)


def test_a_create_whose_answer_was_lost_is_not_retried_into_an_error() -> None:
    """The first POST timed out on the client (the worker answered 201 13 s later: the drill's CI
    run); the retry gets 409 "already exists". The connector exists with this config: created."""
    calls: list[tuple[str, str]] = []
    worker = scripted_worker([TimeoutError("timed out"), *[already_exists()] * 100], calls)
    created = worker.create_connector("sink", CONFIG, timeout_s=2.0)
    assert created == {"name": "sink", "config": {k: str(v) for k, v in CONFIG.items()}}
    assert calls == [("POST", "/connectors"), ("POST", "/connectors"), ("GET", "/connectors/sink/config")]


def test_a_connector_that_already_existed_is_still_an_error() -> None:
    """Without a lost attempt, 409 "already exists" is the truth (another connector by that name):
    it is retried as a rebalance's 409 would be, then raised."""
    calls: list[tuple[str, str]] = []
    worker = scripted_worker([already_exists()] * 100, calls)
    with pytest.raises(RestError, match="already exists"):
        worker.create_connector("sink", CONFIG, timeout_s=0.3)
    assert ("GET", "/connectors/sink/config") not in calls
