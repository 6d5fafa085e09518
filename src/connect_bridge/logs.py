"""Logging set-up for every ``connect-bridge`` command: one place, one format, one level.

The CLI's global ``--log-level`` / ``-q`` / ``-v`` choose the level of the ``connect_bridge``
loggers (docs/cli.md); ``serve`` (or anything else that runs without the CLI) gets the same format
at INFO. An application that has already configured logging keeps its own: nothing here replaces
handlers someone else installed.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["DEFAULT_LEVEL", "FORMAT", "LEVELS", "configure_logging", "others_level"]

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
"""``--log-level`` choices."""
DEFAULT_LEVEL = "info"
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure_logging(level: str | int = DEFAULT_LEVEL) -> None:
    """Log to stderr at ``level``, unless the process configured logging already (an embedding
    application, or the CLI before ``serve`` asks again: the CLI's choice stands)."""
    if logging.getLogger().handlers:
        return
    number = LEVELS[level] if isinstance(level, str) else level
    logging.basicConfig(level=others_level(number), stream=sys.stderr, format=FORMAT)
    logging.getLogger("connect_bridge").setLevel(number)


def others_level(level: int) -> int:
    """The level of every other library's loggers (kafka-python, py4j, asyncio): their warnings
    and errors always, their INFO only with ``-v``, never their DEBUG. At INFO, py4j announces
    every closed gateway connection and kafka-python every connection it opens: noise in an
    operator's terminal; their DEBUG is wire-level chatter even when debugging the bridge."""
    return max(level, logging.WARNING) if level > logging.DEBUG else logging.INFO
