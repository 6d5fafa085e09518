"""PNG charts of ``analyze`` (matplotlib, Agg; no pyplot state), drawn from collected aggregates.

Per drill (for the drills :func:`pick_drills` chooses): items run per worker over time (the
ownership timeline), unassigned items and items on two or more workers over time, member and group
epochs over time. For the fleet: histograms of moves and unassigned time across all drills.
Series arrive binned (:func:`connect_bridge.pipeline.metrics.collect_series`): a bin shows its peak
value, an empty bin carries the previous bin's last value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MAX_LEGEND = 12


def pick_drills(drills: Sequence[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """Up to ``n`` drills to chart: failing ones first, then by overlaps, unassigned time, name."""
    order = sorted(
        drills,
        key=lambda d: (
            d["ok"],
            -d["overlaps"],
            -d["overlap_ms"],
            -d["unassigned_item_ms"],
            -d["moves"],
            d["name"],
        ),
    )
    return [d for d in order[: max(n, 0)] if d["events"] > 0]


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:60] or "drill"


def densify(points: Sequence[tuple[int, Any, Any]], bins: int, start: float) -> list[float]:
    """Binned ``(bin, peak, last)`` points → one value per bin (carrying the last value forward)."""
    values: list[float] = []
    it = iter(points)
    nxt = next(it, None)
    carry = start
    for b in range(bins):
        if nxt is not None and nxt[0] == b:
            values.append(float(nxt[1]))
            carry = float(nxt[2])
            nxt = next(it, None)
        else:
            values.append(carry)
    return values


def _figure(title: str, ylabel: str, xlabel: str = "time (s)") -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _steps(
    path: Path,
    title: str,
    ylabel: str,
    series: Mapping[str, Sequence[Any]],
    end_ms: int,
    bins: int,
    start: float,
) -> None:
    fig, ax = _figure(title, ylabel)
    width = (end_ms + 1) / bins / 1000.0
    xs = [b * width for b in range(bins)]
    for label in sorted(series):
        ax.step(xs, densify(series[label], bins, start), where="post", label=label, linewidth=1.2)
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    elif len(series) <= MAX_LEGEND:
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlim(0, max(xs[-1] + width, 1e-3))
    fig.savefig(path)


def _histogram(path: Path, title: str, xlabel: str, values: Sequence[float]) -> None:
    fig, ax = _figure(title, "drills", xlabel)
    if values:
        n_bins = max(1, min(40, int(math.sqrt(len(values))) + 1))
        ax.hist(values, bins=n_bins, color="#4477aa", edgecolor="white")
    else:
        ax.text(0.5, 0.5, "no drills", ha="center", va="center", transform=ax.transAxes)
    fig.savefig(path)


def draw_all(
    directory: Path,
    drills: Sequence[Mapping[str, Any]],
    chosen: Sequence[Mapping[str, Any]],
    series: Mapping[str, Mapping[str, Mapping[str, Sequence[Any]]]],
    bins: int,
) -> dict[str, Any]:
    """Draw every chart into ``directory``; returns ``{"fleet": [(title, file)], "drills":
    {name: [(title, file)]}}`` with files relative to ``directory``'s parent."""
    directory.mkdir(parents=True, exist_ok=True)
    rel = directory.name
    out: dict[str, Any] = {"fleet": [], "drills": {}}
    fleet = [
        ("moves per drill", "fleet-moves.png", "moves", [d["moves"] for d in drills]),
        (
            "unassigned item time per drill",
            "fleet-unassigned.png",
            "unassigned item time (s)",
            [d["unassigned_item_ms"] / 1000.0 for d in drills],
        ),
    ]
    for title, file, xlabel, values in fleet:
        _histogram(directory / file, f"{title} ({len(values)} drills)", xlabel, values)
        out["fleet"].append((title, f"{rel}/{file}"))
    for i, drill in enumerate(chosen):
        key, name, end = drill["drill"], drill["name"], drill["end_ms"]
        stem = f"{i:02d}-{slug(name)}"
        made = []
        kinds = [
            ("ownership", "items run per worker", "items", series.get("load", {}), 0.0),
            ("unassigned", "unassigned / overlapping items", "items", series.get("states", {}), 0.0),
            ("epochs", "member and group epochs", "epoch", series.get("epochs", {}), math.nan),
        ]
        for suffix, title, ylabel, data, start in kinds:
            file = f"{stem}-{suffix}.png"
            _steps(directory / file, f"{name}: {title}", ylabel, data.get(key, {}), end, bins, start)
            made.append((title, f"{rel}/{file}"))
        out["drills"][name] = made
    return out
