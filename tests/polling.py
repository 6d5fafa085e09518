"""Waiting for a condition in tests: poll it, never sleep a fixed time and hope.

A fixed ``sleep`` before an assertion is either too short on a loaded machine (a flaky test) or
too long everywhere else (a slow one). These helpers poll ``condition`` every ``interval`` seconds
and return its first truthy value, so a caller can use what it waited for; they fail with
``message`` after ``timeout`` seconds. A sleep that *is* the test (a session left to expire, a
"nothing may happen for a while" check) stays a sleep, with a comment saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["eventually", "poll", "wait_until"]

T = TypeVar("T")


def poll(condition: Callable[[], T], timeout: float, interval: float = 0.01) -> T | None:
    """``condition()``'s first truthy value within ``timeout`` seconds, else None (no failure: for
    callers that explain a timeout themselves, like a broker that did not start)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)
    return value


def wait_until(
    condition: Callable[[], T],
    timeout: float = 5.0,
    interval: float = 0.01,
    message: str | Callable[[], str] = "condition not met in time",
) -> T:
    """``condition()``'s first truthy value; ``AssertionError(message)`` after ``timeout`` seconds
    (``message`` may be a callable, to describe the state at the time of failure)."""
    value = poll(condition, timeout, interval)
    if not value:
        raise AssertionError(message() if callable(message) else message)
    return value


async def eventually(
    condition: Callable[[], T],
    timeout: float = 8.0,
    interval: float = 0.01,
    message: str | Callable[[], str] = "condition not reached in time",
) -> T:
    """``wait_until`` for a coroutine: sleeps with ``asyncio.sleep`` so the loop (a server, a
    watcher, a worker under test) runs between polls."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(message() if callable(message) else message)
        await asyncio.sleep(interval)
    return value
