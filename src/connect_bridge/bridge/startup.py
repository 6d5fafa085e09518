"""What can stop ``connect-bridge serve`` from starting, told the way an operator can act on it.

A port in use, an upstream cluster that is not up yet: these happen on every deploy, so each becomes
one line naming the address and what to change (``StartupError``), never a traceback. An upstream
that refuses at start is retried with backoff for a bounded time (``upstream_start_timeout_ms``):
bridge and brokers are often started together, and the bridge should not lose that race.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator

log = logging.getLogger("connect_bridge.startup")

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 10.0
"""Backoff between attempts to reach the upstream cluster at start: 1, 2, 4, 8, 10, 10... s."""
MIN_ATTEMPT_S = 1.0
"""Time given to the last attempt even when the budget is (nearly) spent."""


class StartupError(Exception):
    """``serve`` cannot start; the message is one line saying what is wrong and what to do."""


def reason(exc: BaseException) -> str:
    """The operating system's words for an OSError ("Address already in use"), else the message.

    asyncio's bind errors carry a long "error while attempting to bind on address ..." text; the
    errno's own description is what the operator needs next to the address we print ourselves."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


def address(host: str, port: int) -> str:
    """``host:port``, IPv6 hosts in brackets (as the settings spell them)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_BIND_FIXES = {
    errno.EADDRINUSE: "stop what holds it or change {setting}",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine; change {setting}",
    errno.EACCES: "ports below 1024 need privileges; change {setting}",
}
"""What to do about a bind error, by errno; anything else: change the setting."""


def bind_error(what: str, host: str, port: int, exc: OSError, setting: str) -> StartupError:
    """A listener that could not bind: which one, where, why, and the setting that moves it."""
    fix = _BIND_FIXES.get(exc.errno or 0, "change {setting}").format(setting=setting)
    return StartupError(f"cannot {what} on {address(host, port)}: {reason(exc)}; {fix}")


def backoff(first_s: float = FIRST_RETRY_S, cap_s: float = MAX_RETRY_S) -> Iterator[float]:
    """Doubling delays, capped: a cluster still starting is asked often, a down one not hammered."""
    delay = first_s
    while True:
        yield delay
        delay = min(delay * 2, cap_s)


async def retry_until(
    attempt: Callable[[], Awaitable[None]],
    what: str,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Run ``attempt`` until it succeeds or ``timeout_s`` has passed, logging one line per failure.

    ``what`` names the target (``upstream 10.0.0.1:9092``). Raises ``StartupError`` when the time is
    up; each attempt is itself bounded by the time left, so a black-holed address cannot hang it."""
    deadline = clock() + timeout_s
    delays = backoff()
    number = 0
    while True:
        number += 1
        try:
            await asyncio.wait_for(attempt(), max(deadline - clock(), MIN_ATTEMPT_S))
        except OSError as exc:  # refused, unreachable, timed out, closed mid-answer
            why = reason(exc)
        else:
            if number > 1:
                log.info("%s reachable (attempt %d)", what, number)
            return
        left = deadline - clock()
        if left <= 0:
            raise StartupError(
                f"{what} unreachable ({why}) after {number} attempts in {timeout_s:g} s; check that the "
                "brokers are up and the address is right, or raise upstream_start_timeout_ms"
            )
        delay = min(next(delays), left)
        log.warning(
            "%s unreachable (%s), retrying in %.3g s (attempt %d; giving up %g s after start)",
            what,
            why,
            delay,
            number + 1,
            timeout_s,
        )
        await sleep(delay)
