"""Ctrl-C in ``analyze`` and ``drill fleet``: one line, exit status 130, and no half-written ``--out``.

Both commands drive a Spark JVM through Py4J. Interrupted with Spark's own SIGINT handler, the
operator saw Py4J's tracebacks (the handler re-enters the gateway mid-command) and an "internal
error"; and the partial output left in ``--out`` made the rerun refuse the directory. Here:

* the process keeps this module's SIGINT handler when Spark starts (``session.keep_sigint_handler``);
  the first Ctrl-C marks the run interrupted and raises ``KeyboardInterrupt`` once, later ones
  are ignored while the run unwinds;
* whatever escapes the work after that (the ``KeyboardInterrupt``, or the Py4J error of a JVM that
  the same Ctrl-C stopped: a terminal sends it to the whole process group) is the interrupt, not a
  bug; log records of the unwinding (Py4J logs the interrupted command with its traceback) are
  dropped;
* the Spark jobs still running are cancelled, and the output directory is put back as it was when
  it was new or empty (removed, or emptied): the rerun can use it as it is. A directory that held
  an earlier run (``--force``) keeps what is there, and the line says that the rerun needs
  ``--force`` again.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

__all__ = ["INTERRUPTED_EXIT", "OutState", "run_interruptible"]

INTERRUPTED_EXIT = 130
"""128 + SIGINT, as a shell reports a command stopped by Ctrl-C."""


class OutState:
    """What ``--out`` was before the command touched it: absent, empty, or holding files."""

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out)
        self.existed = self.path.exists()
        self.was_empty = not self.existed or (self.path.is_dir() and not any(self.path.iterdir()))

    def restore(self) -> str:
        """Put a new or empty ``--out`` back as it was; the words for the ``interrupted`` line."""
        if not self.was_empty:
            return f"--out {self.path} holds part of this run (rerun with --force to replace it)"
        if self.path.is_dir():
            if self.existed:
                for child in self.path.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
            else:
                shutil.rmtree(self.path, ignore_errors=True)
        return f"nothing was kept in --out {self.path}"


class _DuringInterrupt(logging.Filter):
    """Drops the records of the unwinding once the run is interrupted (Py4J's "KeyboardInterrupt
    while sending command." with its traceback, on the root logger)."""

    def __init__(self, interrupted: threading.Event) -> None:
        super().__init__()
        self.interrupted = interrupted

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.interrupted.is_set():
            return True
        kind = record.exc_info[0] if record.exc_info else None
        noise = kind is not None and issubclass(kind, KeyboardInterrupt)
        return not (noise or record.name == "root" or record.name.startswith("py4j"))


@contextlib.contextmanager
def _filtered(interrupted: threading.Event) -> Iterator[None]:
    handlers = list(logging.getLogger().handlers)
    quiet = _DuringInterrupt(interrupted)
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


def run_interruptible(work: Callable[[], int], out: OutState) -> int:
    """``work()``'s exit status, or :data:`INTERRUPTED_EXIT` after a Ctrl-C (module docstring)."""
    from connect_bridge.pipeline import session

    interrupted = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if not interrupted.is_set():
            interrupted.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    session.keep_sigint_handler(True)
    try:
        with _filtered(interrupted):
            try:
                return work()
            except BaseException:
                if not interrupted.is_set():
                    raise
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the cleanup is short: let it finish
            session.cancel_jobs()
            where = out.restore()
    finally:
        session.keep_sigint_handler(False)
        signal.signal(signal.SIGINT, previous)
    print(f"connect-bridge: interrupted; {where}", file=sys.stderr)
    return INTERRUPTED_EXIT
