"""Rebalance pauses of one drill, from its collected ownership rows and actions (no Spark).

What an operator asks of a rebalance is how long work stopped and who it moved to. A **pause** is
a stretch of time in which one or more configured items ran nowhere, their gaps overlapping or
touching (a rebalance stops the items it moves at about the same time, and they resume together).
Per pause: when it began and ended, the longest time one item ran nowhere in it, how many items
it stopped, which worker each item ran on before and after it (``w1 → w2``; the same worker on both
sides is a restart in place, as an eager rebalance does), and the latest scenario action at or
before its start (its likely trigger: ``crash w2``).

The rows are :func:`connect_bridge.pipeline.chartdata.collect`'s, which are capped to the most
eventful items of a drill (``MAX_ITEMS``): a pause lists the items of those rows only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOBODY = "nobody"
"""Who ran an item before its first run, or after its last (the item was configured later, or
removed, or the drill ended)."""


@dataclass(frozen=True)
class Pause:
    """One pause: configured work ran nowhere from ``start_ms`` to ``end_ms``."""

    start_ms: int
    end_ms: int
    longest_ms: int
    """The longest time one item of this pause ran nowhere."""
    longest_item: tuple[str, int]
    """(connector, task) of that item (task -1: the connector instance)."""
    items: int
    """Items that ran nowhere during the pause."""
    moved: tuple[tuple[str, str, int], ...]
    """(worker before, worker after, items), most items first."""
    trigger: str | None
    """The latest action at or before ``start_ms`` (``crash w2``, ``upgrade w1 eager → new``)."""


def _action_text(action: Mapping[str, Any]) -> str:
    text = f"{action['kind']} {action.get('worker') or ''}".strip()
    if action["kind"] in ("upgrade", "downgrade") and action.get("detail"):
        text += f" {action['detail']}"
    return text


def rebalance_pauses(rows: Sequence[Mapping[str, Any]], actions: Sequence[Mapping[str, Any]]) -> list[Pause]:
    """The pauses of a drill, in time order (see the module's docstring)."""
    gaps = sorted(
        (r for r in rows if r["kind"] == "unassigned" and r["end_ms"] > r["start_ms"]),
        key=lambda r: (r["start_ms"], r["connector"], r["task"]),
    )
    runs: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["kind"] == "run":
            runs.setdefault((r["connector"], r["task"]), []).append(r)
    episodes: list[list[Mapping[str, Any]]] = []
    end = None
    for gap in gaps:
        if end is None or gap["start_ms"] > end:
            episodes.append([])
            end = gap["end_ms"]
        episodes[-1].append(gap)
        end = max(end, gap["end_ms"])
    ordered = sorted(actions, key=lambda a: (a["t_ms"], a.get("seq", 0)))
    out = []
    for episode in episodes:
        start, stop = episode[0]["start_ms"], max(g["end_ms"] for g in episode)
        moves: Counter[tuple[str, str]] = Counter()
        for gap in episode:
            item = (gap["connector"], gap["task"])
            history = runs.get(item, [])
            before = [r for r in history if r["end_ms"] <= gap["start_ms"]]
            after = [r for r in history if r["start_ms"] >= gap["end_ms"]]
            source = max(before, key=lambda r: r["end_ms"])["worker"] if before else NOBODY
            target = min(after, key=lambda r: r["start_ms"])["worker"] if after else NOBODY
            moves[(source, target)] += 1
        worst = max(episode, key=lambda g: (g["end_ms"] - g["start_ms"], -g["start_ms"]))
        triggers = [a for a in ordered if a["t_ms"] <= start]
        out.append(
            Pause(
                start_ms=int(start),
                end_ms=int(stop),
                longest_ms=int(worst["end_ms"] - worst["start_ms"]),
                longest_item=(worst["connector"], int(worst["task"])),
                items=len({(g["connector"], g["task"]) for g in episode}),
                moved=tuple((a, b, n) for (a, b), n in sorted(moves.items(), key=lambda kv: (-kv[1], kv[0]))),
                trigger=_action_text(triggers[-1]) if triggers else None,
            )
        )
    return out


def moved_text(moved: Sequence[tuple[str, str, int]], limit: int = 4) -> str:
    """``w1 → w2 ×3, w2 → w2 ×1 (in place)``; past ``limit`` pairs, ``and N more``."""
    parts = [f"{a} → {b} ×{n}" + (" (in place)" if a == b else "") for a, b, n in moved[:limit]]
    if len(moved) > limit:
        parts.append(f"and {len(moved) - limit} more")
    return ", ".join(parts)
