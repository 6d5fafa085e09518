"""Connector and task identities shared by every layer.

A Connect worker runs two kinds of work: connector instances and tasks. The embedded protocol encodes
both as ``(connector, index)`` pairs where index ``-1`` (``CONNECTOR_TASK``) is the connector instance
itself, so one small immutable value type covers both and sorts deterministically.
"""

from __future__ import annotations

from typing import NamedTuple

CONNECTOR_TASK = -1
"""Task index that stands for the connector instance itself (Java's ``CONNECTOR_TASK``)."""


class ConnectorTaskId(NamedTuple):
    """One unit of Connect work: a connector instance (``task == -1``) or one of its tasks."""

    connector: str
    task: int

    @property
    def is_connector(self) -> bool:
        return self.task == CONNECTOR_TASK

    def __str__(self) -> str:
        return self.connector if self.is_connector else f"{self.connector}-{self.task}"


def configured_items(connectors: dict[str, int]) -> frozenset[ConnectorTaskId]:
    """Every item a config view asks to run: each connector instance plus tasks 0..n-1."""
    out: set[ConnectorTaskId] = set()
    for name, tasks in connectors.items():
        out.add(ConnectorTaskId(name, CONNECTOR_TASK))
        out.update(ConnectorTaskId(name, t) for t in range(tasks))
    return frozenset(out)
