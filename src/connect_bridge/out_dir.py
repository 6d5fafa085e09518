"""The ``--out DIR`` of ``drill run``, ``drill fleet``, ``drill search`` and ``analyze``, checked
before any work starts (docs/drills.md "Output directories").

A fleet or an analysis can run for minutes: finding out at the end that the directory cannot be
written wastes them, and writing into a directory that holds something else mixes two runs' files
(a report of one fleet next to the Parquet of another). So:

* a new path is created (parents too), an existing empty directory is used as it is;
* an existing non-empty directory is refused unless ``--force`` (then the command's files in it are
  replaced; nothing else in it is deleted, so ``--force`` on the wrong directory cannot wipe it);
* ``drill search`` *collects* minimized scenarios into its directory (``tests/regressions``), so for
  it an existing non-empty directory is the normal case (``collect=True``);
* a path that is a file, or that cannot be created or written, is refused with the reason.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class OutDirError(ValueError):
    """The ``--out`` directory cannot be used; the message says why and what to do (one line)."""


def prepare_out(path: str | Path, *, force: bool = False, collect: bool = False) -> Path:
    """Create or check ``path`` for output; raises :class:`OutDirError` before any work is done."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutDirError(f"--out {out} exists and is not a directory; choose a directory")
    if out.is_dir() and not collect and not force and any(out.iterdir()):
        raise OutDirError(
            f"--out {out} is not empty; choose a new or empty directory, or pass --force to write "
            "over the files of an earlier run there"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutDirError(f"--out {out} cannot be created: {_why(exc)}; choose another directory") from None
    try:  # os.access says yes to root even on a read-only mount: try a real file instead
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise OutDirError(f"--out {out} is not writable: {_why(exc)}; choose another directory") from None
    return out


def _why(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno is not None else str(exc)
