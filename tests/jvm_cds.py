"""Class-data sharing (AppCDS) for the Connect worker JVMs of the tests: a worker that loads its
classes from an archive joins its group in about two thirds of the time, with a bit more than half
the CPU (measured on two shared cores, C1 only: 5.0 -> 3.3 s wall, 3.7 -> 2.2 CPU s per start).

Nothing is prepared ahead. The first worker started for a (java, main class, classpath) with no
archive yet records one as it exits (``-XX:ArchiveClassesAtExit``: a graceful stop dumps the classes
it loaded, about 10 s more at exit; a ``kill -9`` dumps nothing and the next start tries again).
Once that process is gone, the archive is renamed into place, and every later start of the same
command uses it (``-XX:SharedArchiveFile``). Archives live in ``~/.cache/connect-bridge/cds/``,
named by a digest of the java binary, the main class and every classpath entry with its size and
modification time, so a rebuilt jar or another JDK makes a new one (the JVM would refuse a stale
one anyway and start without it: ``-Xshare:auto``); the :data:`KEEP` most recently used stay. One
process at a time records an archive (a file lock, released when it is done or its holder is
gone). The JVM's own ``cds`` log lines are off, so worker logs read as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Recording", "cds_options", "records", "settle"]

QUIET = "-Xlog:cds=off,cds+dynamic=off"
"""The JVM's CDS warnings (classes it cannot archive) stay out of the worker's log."""
KEEP = 4
"""Archives kept in the cache (about 50 MB each), the most recently used: a rebuilt add-on jar or
another JDK makes a new one, the old ones would only take space."""


def _cache_root() -> Path:
    return Path.home() / ".cache" / "connect-bridge" / "cds"


def archive_key(java: str, main_class: str, classpath: str) -> str:
    """Digest of what an archive is valid for: the JVM binary, the main class, each classpath entry
    (path, size, modification time)."""
    h = hashlib.sha256()
    for part in (os.path.realpath(java), main_class):
        h.update(part.encode() + b"\0")
    for entry in classpath.split(os.pathsep):
        try:
            st = os.stat(entry)
            h.update(f"{entry}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        except OSError:
            h.update(f"{entry}\0missing\0".encode())
    return h.hexdigest()[:20]


@dataclass
class Recording:
    """A JVM recording the archive at its exit: where it writes, the lock held while it runs."""

    partial: Path
    final: Path
    lock: Any
    process: subprocess.Popen[Any] | None = None


_pending: list[Recording] = []
_guard = threading.Lock()


def settle() -> None:
    """Recordings whose JVM is gone: the archive renamed into place (if it wrote one), lock released."""
    with _guard:
        for rec in list(_pending):
            if rec.process is None or rec.process.poll() is None:
                continue
            _pending.remove(rec)
            with contextlib.suppress(OSError):
                if rec.partial.is_file() and rec.partial.stat().st_size > 0:
                    rec.partial.replace(rec.final)
                    _prune(rec.final.parent)
                else:
                    rec.partial.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                fcntl.flock(rec.lock, fcntl.LOCK_UN)
                rec.lock.close()


def records(process: subprocess.Popen[Any]) -> bool:
    """Whether ``process`` is the JVM recording an archive (it writes it only on a graceful exit:
    a kill would throw the recording away, and the next start would record again)."""
    with _guard:
        return any(rec.process is process for rec in _pending)


def _prune(root: Path) -> None:
    """Keep the :data:`KEEP` most recently used archives (a JVM using one maps it: removing the
    name does not disturb it)."""
    archives = sorted(root.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP:]:
        with contextlib.suppress(OSError):
            old.unlink()
            old.with_suffix(".lock").unlink(missing_ok=True)


def cds_options(java: str, main_class: str, classpath: str) -> tuple[list[str], Recording | None]:
    """JVM options for a start of ``main_class`` on ``classpath``: use the archive when there is
    one; else record it at exit if no other process is recording it (the :class:`Recording` is then
    returned: pass its process to :func:`attach`); else none."""
    settle()
    root = _cache_root()
    key = archive_key(java, main_class, classpath)
    final = root / f"{key}.jsa"
    if final.is_file():
        with contextlib.suppress(OSError):
            os.utime(final)  # used: kept by _prune
        return [f"-XX:SharedArchiveFile={final}", "-Xshare:auto", QUIET], None
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / f"{key}.lock", "a+b")  # held until the recording JVM is gone
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            return [], None
        if final.is_file():  # recorded by another process meanwhile
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
            return [f"-XX:SharedArchiveFile={final}", "-Xshare:auto", QUIET], None
        partial = root / f"{key}.{os.getpid()}.{threading.get_ident()}.partial"
        partial.unlink(missing_ok=True)
        return [f"-XX:ArchiveClassesAtExit={partial}", QUIET], Recording(partial, final, lock)
    return [], None


def attach(recording: Recording | None, process: subprocess.Popen[Any] | None) -> None:
    """The JVM that records ``recording`` (None: it did not start; the lock is released)."""
    if recording is None:
        return
    with _guard:
        recording.process = process
        if process is None:
            with contextlib.suppress(OSError):
                fcntl.flock(recording.lock, fcntl.LOCK_UN)
                recording.lock.close()
            return
        _pending.append(recording)
