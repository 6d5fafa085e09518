"""Progress for the operator: a bar on a terminal, a steady line in a log.

A long command (a drill, a fleet, an analysis) shows a tqdm bar on stderr with the elapsed time,
how much is done of how much, and the current step, when stderr is a terminal. Piped or redirected
into a CI log a bar is noise (carriage returns, a line per refresh), but silence is worse for work
that takes minutes: a command that says so (``plain=True``: ``analyze``, ``drill fleet``, a live
drill) then logs one INFO line at each new step and every :func:`plain_interval` seconds while
nothing else was said, and one when it is done (``-q`` hides them, as it hides the bar). Short
work (a simulated drill) stays silent off a terminal; its result is on stdout either way.

This module imports nothing of the project, so every layer but the pure ``state`` may use it
(docs/cli.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = [
    "Bar",
    "ScheduleClock",
    "StageReporter",
    "counted",
    "on_terminal",
    "plain_interval",
    "simulated_time",
]

log = logging.getLogger("connect_bridge.progress")

TICK_S = 1.0
"""How often an open bar redraws on its own: the elapsed time keeps moving while a step waits
(a live drill sleeping until its next step, a Spark job that reports nothing until it ends)."""


PLAIN_INTERVAL_S = 10.0
"""How often a command off a terminal says how far it is when no step changed in between."""
INTERVAL_ENV = "CONNECT_BRIDGE_PROGRESS_INTERVAL_S"
"""Overrides :data:`PLAIN_INTERVAL_S` (seconds): a CI job that wants fewer lines, a test more."""


def plain_interval() -> float:
    """:data:`PLAIN_INTERVAL_S`, or ``$CONNECT_BRIDGE_PROGRESS_INTERVAL_S`` when it is a positive number."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return PLAIN_INTERVAL_S
    return value if value > 0 else PLAIN_INTERVAL_S


def counted(n: int, noun: str, plural: str = "") -> str:
    """``n`` and ``noun`` in the number that fits (``1 drill``, ``2 drills``, ``1,200 drills``):
    progress and summary lines are read by people, and "1 drills" reads like a bug."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def on_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default stderr) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _sized(stream: IO[str]) -> bool:
    """Whether the terminal says how big it is. A fresh pseudo-terminal (``script``, an IDE's
    console, a container without a size) reports 0×0, and tqdm then draws nothing at all: such a
    terminal gets a fixed 80×24 bar instead of one that follows the size."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError):
        return False
    return size.columns > 0 and size.lines > 0


class Bar:
    """One progress bar: ``update_to`` for done/total, ``step`` for what is happening now.

    On a terminal (and ``enabled``) a tqdm bar, redrawn every :data:`TICK_S`; off a terminal, with
    ``plain``, INFO log lines (module docstring); otherwise inert (no output, no thread). ``clock``
    (``() -> done``) is asked at every tick: work that advances with time rather than by events (a
    live drill following its schedule) moves the count, and so the ETA, while it waits. Use it as a
    context manager so the bar is finished even when the work raises.
    """

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        unit: str = "it",
        *,
        enabled: bool = True,
        plain: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.desc = desc
        self.unit = unit
        self.total = total
        self.done = 0
        self.clock = clock
        self.shown = enabled and on_terminal(sys.stderr)
        self.plain = enabled and plain and not self.shown
        self._step: str | None = None
        self._started = time.monotonic()
        self._said = self._started
        self._lock = threading.Lock()
        sized = self.shown and _sized(sys.stderr)
        self._bar = tqdm(
            total=total,
            desc=desc,
            unit=unit,
            file=sys.stderr,
            disable=not self.shown,
            dynamic_ncols=sized,
            ncols=None if sized else 80,
            nrows=None if sized else 24,
            leave=True,
            # Without a total there is no count worth showing: the elapsed time and the step.
            bar_format=None if total is not None else "{desc} [{elapsed}{postfix}]",
        )
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._logs = contextlib.ExitStack()
        if self.shown:
            # A log line on stderr would land in the middle of the bar: printed above it instead.
            self._logs.enter_context(logging_redirect_tqdm())
        if self.shown or self.plain:
            self._ticker = threading.Thread(target=self._tick, name="progress-tick", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        every = TICK_S if self.shown else min(TICK_S, plain_interval())
        while not self._stop.wait(every):
            if self.clock is not None:
                self.update_to(self.clock())
            if self.shown:
                self._bar.refresh()
            elif time.monotonic() - self._said >= plain_interval():
                self._say()

    def line(self, final: bool = False) -> str:
        """The plain line: ``analyze: 40/200 drills (20%), 1m05s elapsed, about 4m20s left: STEP``."""
        elapsed = time.monotonic() - self._started
        parts = [f"{self.desc}:"]
        if self.total:
            done = min(self.done, self.total)
            parts.append(f"{done:,}/{self.total:,}{self.unit} ({100 * done // self.total}%),")
        parts.append(
            f"{'done in' if final else ''} {_duration(elapsed)}{'' if final else ' elapsed'}".strip()
        )
        if self.total and 0 < self.done < self.total and not final:
            left = elapsed * (self.total - self.done) / self.done
            parts[-1] += f", about {_duration(left)} left"
        text = " ".join(parts)
        return f"{text}: {self._step}" if self._step and not final else text

    def _say(self, final: bool = False) -> None:
        with self._lock:
            self._said = time.monotonic()
            log.info("%s", self.line(final))

    def update_to(self, done: int, total: int | None = None) -> None:
        """``done`` of ``total`` (``total`` unchanged when None)."""
        with self._lock:
            if total is not None:
                self.total = total
            self.done = done
        if total is not None and total != self._bar.total:
            self._bar.total = total
        if self.shown:
            self._bar.update(done - self._bar.n)

    def step(self, name: str) -> None:
        """The current step, shown after the counts (and logged at DEBUG; off a terminal with
        ``plain``, a line at once)."""
        log.debug("%s: %s", self.desc, name)
        changed = name != self._step
        self._step = name
        self._bar.set_postfix_str(name, refresh=True)
        if self.plain and changed:
            self._say()

    def close(self, ok: bool = False) -> None:
        """Stop the ticker and end the bar; ``ok`` (the work finished): a plain bar says so."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self._bar.close()
        self._logs.close()
        if self.plain and ok:
            self.plain = False  # said once
            self._say(final=True)

    def __enter__(self) -> Bar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(ok=kind is None)


def _duration(seconds: float) -> str:
    """``42 s``, ``1m05s``, ``2h03m``: an elapsed time or an estimate, as an operator reads it."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class StageReporter:
    """The ``progress(message)`` callback of ``analyze`` and ``drill fleet``, as a bar.

    Each message becomes the bar's current step; ``done`` (drills done, where the caller knows it)
    moves the count. Callers that only know stages pass just the message.
    """

    def __init__(self, bar: Bar) -> None:
        self.bar = bar
        self._last: str | None = None

    def __call__(self, message: str, done: int | None = None) -> None:
        if done is not None:
            self.bar.update_to(done)
        if message != self._last:  # a count moving under the same stage is not a new step
            self._last = message
            self.bar.step(message)


def simulated_time(bar: Bar) -> Callable[[int, int], None]:
    """The simulator's ``progress(t_ms, end_ms)`` as simulated seconds on ``bar``."""

    def show(t_ms: int, end_ms: int) -> None:
        bar.update_to(t_ms // 1000, end_ms // 1000)

    return show


class ScheduleClock:
    """Seconds into a schedule that runs in real time (a live drill: its steps are due at fixed
    times from the moment the bridge is up), for :class:`Bar`'s ``clock``: the bar then counts
    schedule seconds, and its ETA is the schedule's remaining time, not a rate of steps."""

    def __init__(self, end_s: int) -> None:
        self.end_s = max(1, end_s)
        self._t0: float | None = None

    def start(self) -> None:
        """t = 0 (once; later calls keep the first start)."""
        if self._t0 is None:
            self._t0 = time.monotonic()

    def __call__(self) -> int:
        if self._t0 is None:
            return 0
        return min(self.end_s, int(time.monotonic() - self._t0))
