"""What every ``connect-bridge`` command handler shares: the one-line failure and the ``--out`` rule.

A module of its own so that the handler modules (``cli``, ``cli_bridge``) can share it without
importing each other."""

from __future__ import annotations

import argparse
import sys


def fail(message: str) -> int:
    """``connect-bridge: MESSAGE`` on stderr; exit status 1 (an everyday failure, not a bug)."""
    print(f"connect-bridge: {message}", file=sys.stderr)
    return 1


def out_problem(args: argparse.Namespace, *, collect: bool = False) -> str | None:
    """Create or check ``--out`` before any work starts (the rule: ``out_dir.py``); the problem or None."""
    from connect_bridge.out_dir import OutDirError, prepare_out

    try:
        prepare_out(args.out, force=getattr(args, "force", False), collect=collect)
    except OutDirError as exc:
        return str(exc)
    return None
