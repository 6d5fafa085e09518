"""The server's step interface, as its sides (adoption, high availability) drive it.

Why one value: both sides change the coordinator's state from outside a request (a takeover, a
partition loaded or dropped) and must do it the way a request does — read the coordinator the
server holds now (a load replaces it), submit the records the step made, wait until they are
durable, on the server's clock. Written once, the two sides cannot drift apart in how they do it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from connect_bridge.state.coordinator import GroupCoordinator


@dataclass(frozen=True, slots=True)
class StepHooks:
    coordinator: Callable[[], GroupCoordinator]
    """The coordinator the server holds now (a getter: the server may replace it)."""
    after_step: Callable[[], None]
    """Hands the records the last step made to the committer and sends what they released."""
    durable: Callable[[], Awaitable[None]]
    """Waits until everything handed to the committer is durable."""
    clock: Callable[[], int]
    """The server's clock, in ms."""


def of_server(server: Any) -> StepHooks:
    """The hooks of a ``BridgeServer`` (typed ``Any``: the server module imports its sides)."""
    return StepHooks(
        lambda: server.coordinator,
        server.after_step,
        lambda: server.committer.durable(server.committer.written),
        server.clock,
    )
