"""Progress bars for the operator's terminal, and nothing anywhere else.

A long command (a drill, a fleet, an analysis) shows a tqdm bar on stderr with the elapsed time,
how much is done of how much, and the current step. Only when stderr is a terminal: piped or
redirected into a CI log, a bar is noise (carriage returns, a line per refresh), so then it prints
nothing at all, not even a final line; the command's result is on stdout either way. ``-v`` still
gets the steps as plain DEBUG log lines (:func:`Bar.step` logs them), for logs that want them.

This module imports nothing of the project, so every layer but the pure ``state`` may use it
(docs/cli.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import IO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = ["Bar", "StageReporter", "counted", "on_terminal", "simulated_time"]

log = logging.getLogger("connect_bridge.progress")

TICK_S = 1.0
"""How often an open bar redraws on its own: the elapsed time keeps moving while a step waits
(a live drill sleeping until its next step, a Spark job that reports nothing until it ends)."""


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

    Inert (no output, no thread) unless ``enabled`` and stderr is a terminal; use it as a context
    manager so the bar is finished even when the work raises.
    """

    def __init__(
        self, desc: str, total: int | None = None, unit: str = "it", *, enabled: bool = True
    ) -> None:
        self.desc = desc
        self.shown = enabled and on_terminal(sys.stderr)
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
            self._ticker = threading.Thread(target=self._tick, name="progress-tick", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self._bar.refresh()

    def update_to(self, done: int, total: int | None = None) -> None:
        """``done`` of ``total`` (``total`` unchanged when None)."""
        if total is not None and total != self._bar.total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def step(self, name: str) -> None:
        """The current step, shown after the counts (and logged at DEBUG)."""
        log.debug("%s: %s", self.desc, name)
        self._bar.set_postfix_str(name, refresh=True)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self._bar.close()
        self._logs.close()

    def __enter__(self) -> Bar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


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
