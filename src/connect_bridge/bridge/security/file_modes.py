"""Files that say who may do what must not be changeable by others: refused, as ssh refuses them.

Why: the credentials file (``sasl.credentials_file``) says which passwords open the bridge, the ACL
file (``authorization.acl_file``) which principal may join which group. If another local user can
write either (or replace it, through a directory they can write), they can make themselves a user or
give themselves a group, and the bridge would load it silently at its next start. ``ssh`` refuses an
``authorized_keys`` that others can write (``StrictModes``); the bridge refuses these files the same
way, with one line saying what to ``chmod``: a mode to fix once, and no silent hole.

``writable_by_others(path)`` is the check: the file itself writable by its group or everyone, or its
directory writable by group or everyone without the sticky bit (``/tmp`` is sticky: others there can
not replace a file they do not own).
"""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["writable_by_others"]


def writable_by_others(path: Path) -> str | None:
    """None when only the owner (and root) can change ``path``, else one line saying why and the fix.
    A file that cannot be stat'ed is left to the reader to report."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        parent = path.resolve().parent
        parent_mode = parent.stat().st_mode
    except OSError:
        return None
    if mode & 0o022:
        return f"mode {mode:04o} lets others change it: chmod go-w {path}"
    if stat.S_IMODE(parent_mode) & 0o022 and not parent_mode & stat.S_ISVTX:
        return (
            f"its directory {parent} (mode {stat.S_IMODE(parent_mode):04o}) lets others replace it: "
            f"chmod go-w {parent}"
        )
    return None
