"""What a password guesser costs the bridge, and what it costs the guesser (terminated SASL).

Why: a PLAIN login runs PBKDF2 over the password (``scram.verify_password``, milliseconds of CPU). On
the single event loop that serves every heartbeat, a few clients guessing passwords would stall
every authenticated member (measured before: heartbeat p50 1 ms -> 10 ms under 4 guessing threads),
and failures cost a guesser nothing. So:

- ``PasswordChecks`` runs the expensive step (``SaslServer.evaluate`` of a server whose
  ``expensive`` is true: PLAIN) in a small thread pool of its own, ``sasl.password_check_threads``
  threads, with at most ``sasl.max_pending_password_checks`` checks running or waiting. Past that
  bound a new check is not queued: the gate closes that connection unanswered, which a Kafka client
  takes as a disconnect during authentication and retries after its reconnect backoff (an answer
  with SASL_AUTHENTICATION_FAILED would instead be fatal to it, a wrong verdict on a right
  password). ``hashlib.pbkdf2_hmac`` releases the GIL, so the loop runs while a check does.
- ``FailedLogins`` makes failures visible: the first failure of a (mechanism, address) is logged
  at WARNING at once, and the ones after it in the same ``FAILURE_LOG_INTERVAL_S`` are summarised in
  one WARNING line per (mechanism, address) at the end of the interval (``N failed PLAIN
  authentications from ADDRESS in the last 10 s``), so a guessing client shows up in the log
  however fast it guesses, in a bounded number of lines. Counts per mechanism are the
  ``connect_bridge_sasl_authentications_total{result="failed"}`` series (and ``result="busy"`` for
  checks refused at the bound).
- The failure answer itself waits ``sasl.failed_authentication_delay_ms`` (Kafka's
  ``connection.failed.authentication.delay.ms``, 100 ms) before it is sent, in the gate
  (``edge.sasl_gate``): one connection guesses at most ten times a second.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["FAILURE_LOG_INTERVAL_S", "ChecksBusy", "FailedLogins", "PasswordChecks"]

log = logging.getLogger("connect_bridge.sasl")
T = TypeVar("T")

FAILURE_LOG_INTERVAL_S = 10.0
"""Failed logins after the first one of a (mechanism, address) are summarised once per interval."""
MAX_TRACKED_SOURCES = 1024
"""(mechanism, address) pairs counted per interval; past it the rest count as ``other addresses``
(a guesser spread over many addresses must not grow memory without bound)."""


class ChecksBusy(Exception):
    """``PasswordChecks`` is at its bound: the check was not started."""


class PasswordChecks:
    """A bounded pool for password checks (module docstring): ``threads`` workers, ``pending``
    checks at most running or waiting. The count drops when a check *finishes* in its thread, not
    when its waiter goes away, so a client closing mid-check cannot push more work past the bound."""

    def __init__(self, threads: int, pending: int) -> None:
        self.threads = threads
        self.pending = pending
        self.in_flight = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            executor = ThreadPoolExecutor(self.threads, thread_name_prefix="sasl-password-check")
            weakref.finalize(self, executor.shutdown, wait=False)
            self._executor = executor
        return self._executor

    async def run(self, check: Callable[[], T]) -> T:
        """``check()`` in the pool; ``ChecksBusy`` at once when ``pending`` checks are under way."""
        with self._lock:
            if self.in_flight >= self.pending:
                raise ChecksBusy(f"{self.in_flight} password checks under way")
            self.in_flight += 1
        try:
            future = self._pool().submit(check)
        except BaseException:
            self._finished(None)
            raise
        future.add_done_callback(self._finished)
        return await asyncio.wrap_future(future)

    def _finished(self, _: object) -> None:
        with self._lock:
            self.in_flight -= 1


class FailedLogins:
    """Failed logins in the log: one WARNING at the first failure of a (mechanism, address), then one
    summary line per interval while they go on (module docstring)."""

    def __init__(self, interval_s: float = FAILURE_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._held: dict[tuple[str, str], int] = {}
        """Failures since the last line, per (mechanism, address) seen in this interval."""
        self._flush: asyncio.TimerHandle | None = None

    def record(self, mechanism: str | None, host: str, why: str = "invalid credentials") -> None:
        key = (mechanism or "unknown", host)
        if key not in self._held and len(self._held) >= MAX_TRACKED_SOURCES:
            key = (key[0], "other addresses")
        if key in self._held:
            self._held[key] += 1
        else:
            self._held[key] = 0
            log.warning(
                "SASL %s authentication from %s failed (%s); further failures from it are summarised "
                "every %g s",
                key[0],
                key[1],
                why,
                self.interval_s,
            )
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self.interval_s, self.flush)

    def flush(self) -> None:
        """Log the failures held back in the interval that ended; keep counting the sources that
        failed in it for one more interval (a steady guesser is one line per interval)."""
        self._flush = None
        held, self._held = self._held, {}
        for (mechanism, host), count in held.items():
            if count:
                log.warning(
                    "SASL: %d failed %s authentications from %s in the last %g s",
                    count,
                    mechanism,
                    host,
                    self.interval_s,
                )
                self._held[(mechanism, host)] = 0
        if self._held:
            self._flush = asyncio.get_running_loop().call_later(self.interval_s, self.flush)
