"""PNG charts of ``analyze`` (matplotlib, Agg; no pyplot state), drawn from collected aggregates.

Per charted drill (:func:`pick_drills`, worst first) two pictures:

- the **timeline**: the scenario's actions (crashes, stops, restarts, upgrades, bridge restarts,
  config changes; :mod:`.chartdata`) as marks on top and as faint vertical lines through the panels
  below: items run per worker, unassigned / doubly-run items, and member and group epochs;
- the **ownership chart**: one row per item (connector instance or task), a bar per worker that
  ran it, in that worker's colour, with a band in the colour of the worker's protocol; time run by
  two or more workers in red, configured time run by nobody hatched grey, and each rebalance pause
  (:mod:`.pauses`) shaded across all rows and labelled with the longest time an item ran nowhere in
  it. Gaps and overlaps are drawn at least :data:`MIN_BAR_FRACTION` of the axis wide.

For a fleet (more than one drill) also ``fleet.png``: histograms of moves and unassigned time
across all drills (drawn from the collected per-drill rows).
Series arrive binned (:func:`connect_bridge.pipeline.metrics.collect_series`): a bin shows its peak
value, an empty bin carries the previous bin's last value. Every picture is 1400 px wide, drawn
for a page that shows it at full width.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from connect_bridge.pipeline.chartdata import ACTION_KINDS
from connect_bridge.pipeline.pauses import Pause, rebalance_pauses

MAX_LEGEND = 12
WIDTH_IN = 14.0
DPI = 100
OVERLAP_RED = "#d62728"
GAP_GREY = "#9a9a9a"
WORKER_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#c5b0d5",
    "#c49c94",
)
"""Worker colours: matplotlib's tab10/tab20 without the reds, which mean an overlap."""
ACTION_STYLE: dict[str, tuple[str, str]] = {
    "crash": ("#d62728", "X"),
    "stop": ("#ff7f0e", "v"),
    "restart": ("#2ca02c", "^"),
    "upgrade": ("#1f77b4", "P"),
    "downgrade": ("#9467bd", "P"),
    "join": ("#17becf", "o"),
    "bridge restart": ("#000000", "D"),
    "config change": ("#8c564b", "s"),
    "stall": ("#bcbd22", "h"),
}
"""Action kind → (colour, marker) on the timeline."""
PROTOCOL_COLOURS: dict[str, str] = {
    "eager": "#3b3b3b",
    "compatible": "#b8860b",
    "sessioned": "#6a3d9a",
    "new": "#00a087",
}
"""Worker protocol → the colour of the band under a run bar (no red: red means an overlap)."""
UNKNOWN_PROTOCOL = "#c8c8c8"
MIN_BAR_FRACTION = 1 / 250
"""The least width of a gap or overlap bar, as a share of the time axis: a 200 ms rebalance pause
on a 540 s drill would otherwise be a sliver of one pixel."""
LABELLED_PAUSES = 12
"""Up to this many pauses, each is labelled with its length on the ownership chart."""
LABELLED_ACTIONS = 40
"""Up to this many actions, each mark is labelled with its worker."""


def pick_drills(drills: Sequence[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """Up to ``n`` drills to chart: the first ``n`` of :func:`worst_first` that have events."""
    return [d for d in worst_first(drills)[: max(n, 0)] if d["events"] > 0]


def worst_first(drills: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Failing drills first, then by overlaps, overlap time, unassigned time, moves, name."""
    return sorted(
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


def worker_colours(workers: Sequence[str]) -> dict[str, str]:
    """One colour per worker, the same in a drill's timeline and ownership chart."""
    return {w: WORKER_COLOURS[i % len(WORKER_COLOURS)] for i, w in enumerate(sorted(set(workers)))}


def item_label(connector: str, task: int) -> str:
    return f"{connector} (instance)" if task == -1 else f"{connector} task {task}"


def _figure(height_in: float, left_px: float = 70, right_px: float = 30, hspace: float = 0.2) -> Any:
    """A figure with fixed margins (in pixels at :data:`DPI`; legends go in the right margin).

    Fixed margins rather than constrained layout: the layout solver took a third of the drawing
    time, and these pictures all have the same shape."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    width_px, height_px = WIDTH_IN * DPI, height_in * DPI
    fig.subplots_adjust(
        left=left_px / width_px,
        right=1 - right_px / width_px,
        top=1 - 28 / height_px,
        bottom=48 / height_px,
        hspace=hspace,
        wspace=0.12,
    )
    return fig


def _label_px(labels: Sequence[str], fontsize: float) -> float:
    """Room for the longest y tick label, plus the axis label and ticks."""
    return 30 + 0.62 * fontsize * max((len(t) for t in labels), default=4)


def _style(ax: Any, title: str, ylabel: str, xlabel: str | None = None) -> None:
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.grid(True, alpha=0.3)


def _steps(
    ax: Any,
    series: Mapping[str, Sequence[Any]],
    xs: Sequence[float],
    bins: int,
    start: float,
    colours: Mapping[str, str] | None = None,
) -> None:
    for label in sorted(series):
        colour = (colours or {}).get(label)
        ax.step(
            xs, densify(series[label], bins, start), where="post", label=label, linewidth=1.2, color=colour
        )
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    elif len(series) <= MAX_LEGEND:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def draw_timeline(
    path: Path,
    name: str,
    end_ms: int,
    series: Mapping[str, Mapping[str, Sequence[Any]]],
    actions: Sequence[Mapping[str, Any]],
    colours: Mapping[str, str],
    bins: int,
) -> None:
    """The drill's timeline: actions on top, then worker load, item states and epochs."""
    fig = _figure(9.0, left_px=_label_px(ACTION_KINDS, 8) + 20, right_px=170, hspace=0.32)
    axes = fig.subplots(4, 1, sharex=True, height_ratios=[1.3, 2, 1.4, 1.4])
    width = (end_ms + 1) / bins / 1000.0
    xs = [b * width for b in range(bins)]
    total = actions[0]["total"] if actions else 0
    shown = f"{total:,} actions" + (f", first {len(actions):,} shown" if total > len(actions) else "")
    _actions(axes[0], actions, f"{name}: scenario actions ({shown})")
    _style(axes[1], "items run per worker", "items")
    _steps(axes[1], series.get("load", {}), xs, bins, 0.0, colours)
    _style(axes[2], "configured items run nowhere, and items run by two or more workers", "items")
    _steps(axes[2], series.get("states", {}), xs, bins, 0.0)
    _style(axes[3], "member epoch per worker and the coordinator's group epoch", "epoch", "time (s)")
    _steps(axes[3], series.get("epochs", {}), xs, bins, math.nan, colours)
    for ax in axes[1:]:
        for a in actions:
            ax.axvline(a["t_ms"] / 1000.0, color=ACTION_STYLE[a["kind"]][0], alpha=0.35, linewidth=0.8)
    axes[-1].set_xlim(0, max(xs[-1] + width, 1e-3))
    fig.savefig(path)


def _actions(ax: Any, actions: Sequence[Mapping[str, Any]], title: str) -> None:
    _style(ax, title, "")
    kinds = [k for k in ACTION_KINDS if any(a["kind"] == k for a in actions)]
    if not kinds:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "no actions: the cluster ran undisturbed",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return
    row = {k: i for i, k in enumerate(reversed(kinds))}
    for kind in kinds:
        marks = [a for a in actions if a["kind"] == kind]
        colour, marker = ACTION_STYLE[kind]
        ax.scatter(
            [a["t_ms"] / 1000.0 for a in marks], [row[kind]] * len(marks), color=colour, marker=marker, s=40
        )
    if len(actions) <= LABELLED_ACTIONS:
        for a in actions:
            text = a["worker"] or ""
            if a["kind"] in ("upgrade", "downgrade") and a.get("detail"):
                text = f"{text} {a['detail']}"
            if text:
                ax.annotate(
                    text,
                    (a["t_ms"] / 1000.0, row[a["kind"]]),
                    xytext=(4, 4),
                    textcoords="offset points",
                    fontsize=7,
                )
    ax.set_yticks(range(len(kinds)), list(reversed(kinds)), fontsize=8)
    ax.set_ylim(-0.6, len(kinds) - 0.2)


def protocol_at(starts: Sequence[Mapping[str, Any]], worker: str, t_ms: int) -> str | None:
    """The protocol ``worker`` ran at ``t_ms``: that of its latest start at or before it (its first
    start when the run began before any start was logged)."""
    mine = [s for s in starts if s["worker"] == worker]
    before = [s for s in mine if s["t_ms"] <= t_ms]
    chosen = before[-1] if before else (mine[0] if mine else None)
    return None if chosen is None else chosen.get("protocol")


def draw_ownership(
    path: Path,
    name: str,
    end_ms: int,
    rows: Sequence[Mapping[str, Any]],
    colours: Mapping[str, str],
    starts: Sequence[Mapping[str, Any]] = (),
    pauses: Sequence[Pause] = (),
) -> None:
    """Who ran what, when: a row per item, bars per worker with a band in the colour of the
    worker's protocol, overlaps red, unassigned time hatched, rebalance pauses shaded across all
    rows (and labelled with their length); ``starts``: the drill's worker starts (their protocol)."""
    from matplotlib.patches import Patch

    items = sorted({(r["connector"], r["task"]) for r in rows})
    total_items = rows[0]["items"] if rows else 0
    labels = [item_label(c, t) for c, t in items]
    fig = _figure(1.0 + 0.28 * max(len(items), 2), left_px=_label_px(labels, 7), right_px=220)
    ax = fig.add_subplot()
    shown = f"{total_items:,} items" + (
        f", the {len(items)} most eventful shown" if total_items > len(items) else ""
    )
    _style(ax, f"{name}: who ran what, when ({shown})", "", "time (s)")
    span = max(end_ms / 1000.0, 1e-3)
    visible = span * MIN_BAR_FRACTION  # a short gap or a 0-width overlap still shows
    y = {item: i for i, item in enumerate(reversed(items))}
    _draw_ownership_layers(ax, rows, colours, y, visible)
    protocols = _draw_protocol_bands(ax, rows, y, starts)
    _draw_pauses(ax, pauses, visible, len(items))
    ax.set_yticks(range(len(items)), [item_label(c, t) for c, t in reversed(items)], fontsize=7)
    ax.set_ylim(-0.7, max(len(items), 1) - 0.3)
    ax.set_xlim(0, span)
    if not items:
        ax.text(0.5, 0.5, "no item was run", ha="center", va="center", transform=ax.transAxes)
    workers = sorted({r["worker"] for r in rows if r["kind"] == "run"})
    handles = [Patch(facecolor=colours.get(w, "#555555"), label=w) for w in workers[:MAX_LEGEND]]
    handles += [
        Patch(facecolor=PROTOCOL_COLOURS.get(p, UNKNOWN_PROTOCOL), label=f"band: {p} protocol")
        for p in protocols
    ]
    handles.append(Patch(facecolor=OVERLAP_RED, label="two or more workers (overlap)"))
    handles.append(
        Patch(facecolor="none", edgecolor=GAP_GREY, hatch="////", label="configured, run by nobody")
    )
    if pauses:
        handles.append(Patch(facecolor=GAP_GREY, alpha=0.25, label="rebalance pause (work stopped)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path)


_OWNERSHIP_LAYERS: tuple[tuple[str, float, int, dict[str, Any]], ...] = (
    (
        "unassigned",
        0.7,
        1,
        {"facecolors": "none", "edgecolors": GAP_GREY, "hatch": "////", "linewidths": 0},
    ),
    ("run", 0.7, 2, {"edgecolors": "white", "linewidths": 0.4}),
    ("overlap", 0.9, 3, {"facecolors": OVERLAP_RED, "edgecolors": OVERLAP_RED, "linewidths": 0.5}),
)
"""(row kind, bar height, z-order, PolyCollection style) of the ownership chart's layers, bottom up:
overlaps drawn last and taller so that double processing is never hidden behind a run bar."""


def _draw_protocol_bands(
    ax: Any,
    rows: Sequence[Mapping[str, Any]],
    y: Mapping[tuple[str, int], int],
    starts: Sequence[Mapping[str, Any]],
) -> list[str]:
    """Under each run bar, a band in its worker's protocol colour; the protocols drawn, in order."""
    from matplotlib.collections import PolyCollection

    if not starts:
        return []
    ordered = sorted(starts, key=lambda s: (s["t_ms"], s.get("seq", 0)))
    boxes, faces, seen = [], [], []
    for r in rows:
        if r["kind"] != "run":
            continue
        protocol = protocol_at(ordered, r["worker"], r["start_ms"]) or "unknown"
        if protocol not in seen:
            seen.append(protocol)
        start, stop = r["start_ms"] / 1000.0, r["end_ms"] / 1000.0
        low = y[(r["connector"], r["task"])] - 0.35
        boxes.append([(start, low), (start, low + 0.24), (stop, low + 0.24), (stop, low)])
        faces.append(PROTOCOL_COLOURS.get(protocol, UNKNOWN_PROTOCOL))
    if boxes:
        bands = PolyCollection(boxes, facecolors=faces, edgecolors="white", linewidths=0.3, zorder=2.5)
        ax.add_collection(bands)
    order = [p for p in PROTOCOL_COLOURS if p in seen] + [p for p in seen if p not in PROTOCOL_COLOURS]
    return order


def _ms_text(ms: int) -> str:
    return f"{ms:,} ms" if ms < 1000 else f"{ms / 1000:,.1f} s"


def _draw_pauses(ax: Any, pauses: Sequence[Pause], visible: float, rows: int) -> None:
    """Each rebalance pause shaded across every row, at least ``visible`` wide, and labelled."""
    for pause in pauses:
        start = pause.start_ms / 1000.0
        stop = max(pause.end_ms / 1000.0, start + visible)
        ax.axvspan(start, stop, color=GAP_GREY, alpha=0.25, zorder=0.5, linewidth=0)
        if len(pauses) <= LABELLED_PAUSES:
            ax.annotate(
                f"◀ {_ms_text(pause.longest_ms)}",
                (stop, max(rows, 1) - 0.3),
                xytext=(2, -1),
                textcoords="offset points",
                fontsize=7,
                ha="left",
                va="top",
                zorder=5,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
            )


def _draw_ownership_layers(
    ax: Any,
    rows: Sequence[Mapping[str, Any]],
    colours: Mapping[str, str],
    y: Mapping[tuple[str, int], int],
    visible: float,
) -> None:
    """The ownership chart's bars, one PolyCollection per layer: thousands of bars draw in one call,
    not one artist each. ``y``: each item's row; ``visible``: the least width of an overlap or gap bar."""
    from matplotlib.collections import PolyCollection

    for kind, height, z, style in _OWNERSHIP_LAYERS:
        bars = [r for r in rows if r["kind"] == kind]
        if not bars:
            continue
        boxes = []
        for r in bars:
            start, stop = r["start_ms"] / 1000.0, r["end_ms"] / 1000.0
            if kind in ("overlap", "unassigned"):
                stop = max(stop, start + visible)
            low = y[(r["connector"], r["task"])] - height / 2
            boxes.append([(start, low), (start, low + height), (stop, low + height), (stop, low)])
        if kind == "run":
            style = {**style, "facecolors": [colours.get(r["worker"], "#555555") for r in bars]}
        ax.add_collection(PolyCollection(boxes, zorder=z, **style))


def draw_fleet(path: Path, drills: Sequence[Mapping[str, Any]]) -> None:
    """Side by side: how many drills had how many moves, and how much unassigned item time."""
    from matplotlib.ticker import MaxNLocator

    from connect_bridge.progress import counted

    fig = _figure(3.4, left_px=70, right_px=20)
    panels = (
        ("moves per drill", "moves", [float(d["moves"]) for d in drills]),
        (
            "unassigned item time per drill",
            "unassigned item time (s)",
            [d["unassigned_item_ms"] / 1000.0 for d in drills],
        ),
    )
    for ax, (title, xlabel, values) in zip(fig.subplots(1, 2), panels, strict=True):
        _style(ax, f"{title} ({counted(len(values), 'drill')})", "drills", xlabel)
        n_bins = max(1, min(40, int(math.sqrt(len(values))) + 1))
        ax.hist(values, bins=n_bins, color="#4477aa", edgecolor="white")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of drills: no 0.5 ticks
        if xlabel == "moves":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.savefig(path)


def draw_all(
    directory: Path,
    drills: Sequence[Mapping[str, Any]],
    chosen: Sequence[Mapping[str, Any]],
    series: Mapping[str, Mapping[str, Mapping[str, Sequence[Any]]]],
    bins: int,
    detail: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]] | None = None,
) -> dict[str, Any]:
    """Draw every chart into ``directory``; returns ``{"fleet": [(title, file)], "drills":
    {name: [(title, file)]}, "pauses": {name: [Pause]}}`` with files relative to ``directory``'s
    parent (pauses: :func:`connect_bridge.pipeline.pauses.rebalance_pauses` of each charted
    drill). ``detail`` is :func:`connect_bridge.pipeline.chartdata.collect`'s result; fleet
    histograms only for fleets."""
    directory.mkdir(parents=True, exist_ok=True)
    detail = detail or {}
    rel = directory.name
    out: dict[str, Any] = {"fleet": [], "drills": {}, "pauses": {}}
    if len(drills) > 1:
        draw_fleet(directory / "fleet.png", drills)
        out["fleet"].append(("moves and unassigned item time per drill", f"{rel}/fleet.png"))
    for i, drill in enumerate(chosen):
        key, name, end = drill["drill"], drill["name"], drill["end_ms"]
        stem = f"{i:02d}-{slug(name)}"
        drill_series = {part: series.get(part, {}).get(key, {}) for part in ("load", "states", "epochs")}
        owned = detail.get("ownership", {}).get(key, [])
        acts = detail.get("actions", {}).get(key, [])
        starts = detail.get("protocols", {}).get(key, [])
        pauses = rebalance_pauses(owned, acts)
        out["pauses"][name] = pauses
        colours = worker_colours(
            [*drill_series["load"], *drill_series["epochs"], *(r["worker"] for r in owned if r["worker"])]
        )
        draw_timeline(directory / f"{stem}-timeline.png", name, end, drill_series, acts, colours, bins)
        draw_ownership(directory / f"{stem}-ownership.png", name, end, owned, colours, starts, pauses)
        out["drills"][name] = [
            ("timeline", f"{rel}/{stem}-timeline.png"),
            ("ownership", f"{rel}/{stem}-ownership.png"),
        ]
    return out
