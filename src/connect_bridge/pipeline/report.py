"""``index.html`` of ``analyze`` and one page per listed drill: self-contained, relative links only.

The index leads with what an operator looks for (:func:`_glance`): the longest time any task ran
nowhere (which drill, item and moment, after which action) and, for the drill shown, each
rebalance's pause and who moved (:mod:`.pauses`). Then the summary as a table, each metric explained
next to its value (a single drill's numbers appear in that one table only). For a fleet
(more than one drill) follow the fleet histograms and a table of drills, worst first (failing drills,
then by overlaps, overlap time, unassigned time, moves), each linking to its page under ``drills/``;
then the worst drill's charts. A single drill's index shows its charts directly. The fleet table
and the drill pages stop at :data:`FLEET_ROWS` drills; ``summary.json`` and ``drills.parquet`` list
them all. Numbers carry thousands separators, times a unit (ms under a second, else s).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from connect_bridge.pipeline.charts import slug, worst_first
from connect_bridge.pipeline.pauses import Pause, moved_text

TABLES = ("drills.parquet", "items.parquet", "intervals.parquet")
FLEET_ROWS = 500
"""Drills listed (and given a page) in a fleet's report, worst first."""
DRILL_DIR = "drills"

METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("ok", "ok", "flag", "All three invariants held: exclusive, converged and balanced."),
    ("exclusive", "exclusive", "flag", "No connector or task was ever run by two workers at once."),
    (
        "converged",
        "converged",
        "flag",
        "At the end every configured connector and task ran on exactly one live worker, "
        "and nothing else ran.",
    ),
    (
        "balanced",
        "balanced",
        "flag",
        "At the end connector counts per live worker differed by at most 1, and task counts too.",
    ),
    ("overlaps", "overlaps", "count", "Times a worker started an item another worker was still running."),
    (
        "overlap_ms",
        "overlap time",
        "ms",
        "Summed over items, the time two or more workers ran the same item (double processing).",
    ),
    ("moves", "moves", "count", "Starts of an item on another worker than the one that ran it last."),
    ("rebalances", "rebalances", "count", "Epoch events: a worker took a new member epoch or generation."),
    (
        "longest_unassigned_ms",
        "longest time a task ran nowhere",
        "ms",
        "The longest single stretch in which one configured connector or task ran on no worker.",
    ),
    (
        "unassigned_item_ms",
        "unassigned item time",
        "ms",
        "The time each configured item ran nowhere, added up over all items.",
    ),
    ("events", "events", "count", "Lines in the drill's event log."),
)
"""``(key, label, kind, explanation)`` of every metric shown, in order; kind: flag, count or ms."""
EXPLAIN = {key: text for key, _, _, text in METRICS}
FLEET_COLUMNS = (
    "overlaps", "overlap_ms", "moves", "rebalances", "longest_unassigned_ms", "unassigned_item_ms", "events"
)  # fmt: skip
MAX_KEYS = frozenset({"longest_unassigned_ms"})
"""Metrics whose fleet total is the largest of any drill, not a sum."""
PAUSE_ROWS = 15
"""Rebalance pauses listed on a page (the longest ones, in time order)."""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; max-width: 1500px; }
h1 { margin-bottom: 0.2em; }
.verdict { font-size: 1.15em; margin: 0.3em 0 1em; }
.good { color: #1a7f37; } .bad, td.no { color: #c62828; font-weight: bold; }
table { border-collapse: collapse; font-size: 0.92em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #d0d0d0; padding: 0.3em 0.7em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.why { color: #555; max-width: 48em; }
tr.failed td { background: #fdecec; }
figure { margin: 1em 0; }
figure img { width: 100%; height: auto; border: 1px solid #e4e4e4; display: block; }
figcaption { color: #555; font-size: 0.9em; margin-top: 0.3em; }
code { background: #f4f4f4; padding: 0 0.2em; }
.note { color: #555; }
.glance { border: 1px solid #d0d0d0; background: #fafafa; padding: 0.6em 1em; margin: 0.5em 0 1em; }
.glance p { margin: 0.3em 0; }
.glance .big { font-size: 1.3em; font-weight: bold; }
tr.worst td { background: #fff4e5; }
"""


def count(n: int) -> str:
    """``1234567`` → ``1,234,567``."""
    return f"{int(n):,}"


def duration(ms: int) -> str:
    """Milliseconds for people: ``850 ms``, ``12.3 s``, ``4,200.0 s``."""
    ms = int(ms)
    return f"{ms:,} ms" if abs(ms) < 1000 else f"{ms / 1000:,.1f} s"


def _num(kind: str, value: Any) -> str:
    """A right-aligned number cell; a time also carries its exact milliseconds as a tooltip."""
    if kind == "ms":
        return f'<td class="num" title="{count(value)} ms">{duration(value)}</td>'
    return f'<td class="num">{count(value)}</td>'


def _flag(value: bool) -> str:
    return '<td class="num yes">yes</td>' if value else '<td class="num no">no</td>'


def _failures(d: Mapping[str, Any]) -> str:
    reasons = [
        why
        for bad, why in (
            (not d["exclusive"], "overlaps"),
            (not d["converged"], "not converged"),
            (not d["balanced"], "not balanced"),
        )
        if bad
    ]
    return "failed: " + ", ".join(reasons) if reasons else "ok"


def _head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
        f"<style>{_STYLE}</style></head><body>",
    ]


def summary_table(doc: Mapping[str, Any], drills: Sequence[Mapping[str, Any]]) -> str:
    """The totals (a fleet) or the drill's numbers (one drill) as metric | value | meaning."""
    t = doc["totals"]
    fleet = len(drills) != 1
    rows = [
        '<table class="summary" id="summary"><tr><th>metric</th><th>value</th><th>what it means</th></tr>'
    ]
    if fleet:
        rows.append(
            f'<tr><td>drills</td><td class="num">{count(t["drills"])}</td>'
            '<td class="why">Drills analyzed (event logs or drills in the Parquet input).</td></tr>'
        )
    for key, label, kind, why in METRICS:
        if kind == "flag":
            if fleet:
                good = t[key] == t["drills"]
                cls = "good" if good else "bad"
                value = f'<td class="num {cls}">{count(t[key])} of {count(t["drills"])}</td>'
            else:
                value = _flag(drills[0][key])
            why = why if not fleet else f"Drills where: {why[0].lower()}{why[1:]}"
        else:
            value = _num(kind, t[key] if fleet else drills[0][key])
            total = "The largest of any drill." if key in MAX_KEYS else "Summed over all drills."
            why = why if not fleet else f"{why} {total}"
        rows.append(f'<tr><td>{html.escape(label)}</td>{value}<td class="why">{html.escape(why)}</td></tr>')
    rows.append("</table>")
    return "\n".join(rows)


def _verdict(doc: Mapping[str, Any]) -> str:
    t = doc["totals"]
    failed = t["drills"] - t["ok"]
    if not t["drills"]:
        return '<p class="verdict bad">No drills: the inputs held no events.</p>'
    if not failed:
        text = "the drill passed" if t["drills"] == 1 else f"all {count(t['drills'])} drills passed"
        return f'<p class="verdict good">✔ {text}: no overlaps, converged, balanced.</p>'
    text = (
        "the drill failed" if t["drills"] == 1 else f"{count(failed)} of {count(t['drills'])} drills failed"
    )
    return f'<p class="verdict bad">✘ {text} (see the table below).</p>'


def _item(item: Sequence[Any]) -> str:
    connector, task = item
    return f"{connector} (instance)" if int(task) == -1 else f"{connector} task {task}"


def pause_table(pauses: Sequence[Pause], limit: int = PAUSE_ROWS) -> list[str]:
    """Rebalance pauses as rows: when, the likely trigger, how long work stopped, who moved. The
    ``limit`` longest are listed, in time order; the longest is highlighted."""
    e = html.escape
    if not pauses:
        return ['<p class="note">No pause: every configured item always ran on some worker.</p>']
    shown = sorted(sorted(pauses, key=lambda p: -p.longest_ms)[:limit], key=lambda p: p.start_ms)
    worst = max(pauses, key=lambda p: p.longest_ms)
    parts = [
        '<table class="pauses" id="pauses"><tr><th>at</th><th>after</th><th>longest pause</th>'
        "<th>items paused</th><th>who moved (before → after)</th></tr>"
    ]
    for pause in shown:
        cls = ' class="worst"' if pause is worst else ""
        parts.append(
            f'<tr{cls}><td class="num">{duration(pause.start_ms)}</td><td>{e(pause.trigger or "start")}</td>'
            f'{_num("ms", pause.longest_ms)}<td class="num">{count(pause.items)}</td>'
            f"<td>{e(moved_text(pause.moved))}</td></tr>"
        )
    parts.append("</table>")
    if len(pauses) > len(shown):
        parts.append(f'<p class="note">The {len(shown)} longest of {count(len(pauses))} pauses shown.</p>')
    return parts


def _glance(drills: Sequence[Mapping[str, Any]], pauses: Mapping[str, Sequence[Pause]]) -> list[str]:
    """What an operator looks for first: the longest time a task ran nowhere (which drill, which
    item, when, after what) and, for the drill shown, each rebalance's pause and who moved."""
    e = html.escape
    if not drills:
        return []
    longest = max(drills, key=lambda d: (d["longest_unassigned_ms"], -d["ok"]))
    ms = int(longest["longest_unassigned_ms"])
    where = f" in drill <b>{e(longest['name'])}</b>" if len(drills) > 1 else ""
    found = [p for p in pauses.get(longest["name"], ()) if p.longest_ms == ms]
    if found and ms:
        p = found[0]
        where += f": {e(_item(p.longest_item))} from {duration(p.start_ms)}"
        where += f", after {e(p.trigger)}" if p.trigger else ""
    parts = [
        '<div class="glance" id="glance">',
        f'<p><span class="big">{duration(ms)}</span> longest time a task ran nowhere{where}.</p>',
    ]
    shown = next((d for d in worst_first(drills) if d["name"] in pauses), None)
    if shown is not None:
        title = "Rebalance pauses" + (f" of {e(shown['name'])}" if len(drills) > 1 else "")
        parts.append(f"<p><b>{title}</b> (work stopped, for how long, and where it went):</p>")
        parts += pause_table(pauses[shown["name"]])
    parts.append("</div>")
    return parts


def _figures(name: str, files: Sequence[tuple[str, str]], prefix: str) -> list[str]:
    captions = {
        "timeline": "Timeline. Top: the scenario's actions (also drawn as faint lines below). Then "
        "items run per worker, configured items run nowhere and items run twice, member and group epochs.",
        "ownership": "Ownership: one row per connector instance or task, a bar per worker that ran it. "
        "Red: two or more workers at once (an overlap). Hatched grey: configured but run by nobody.",
    }
    e = html.escape
    out = []
    for kind, file in files:
        out.append(
            f'<figure class="{e(kind)}"><a href="{e(prefix + file)}"><img src="{e(prefix + file)}" '
            f'alt="{e(name)}: {e(kind)}"></a><figcaption>{e(captions.get(kind, kind))}</figcaption></figure>'
        )
    return out


def drill_page_name(rank: int, name: str) -> str:
    """The page of the ``rank``-th worst drill, relative to the report directory."""
    return f"{DRILL_DIR}/{rank:04d}-{slug(name)}.html"


def _drill_section(
    d: Mapping[str, Any],
    files: Sequence[tuple[str, str]] | None,
    prefix: str,
    charted: int,
    table: bool = True,
) -> list[str]:
    """A drill's line, its numbers (unless the page's summary table already shows them: ``table``
    False) and its charts."""
    e = html.escape
    parts = [
        f"<p>{'<span class=good>ok</span>' if d['ok'] else '<span class=bad>' + e(_failures(d)) + '</span>'}"
        f" · ran {duration(d['end_ms'])} · {count(d['items'])} items · {count(d['live_workers'])} live "
        "workers at the end</p>",
    ]
    if table:
        parts.append('<table class="drill"><tr><th>metric</th><th>value</th><th>what it means</th></tr>')
        for key, label, kind, why in METRICS:
            value = _flag(d[key]) if kind == "flag" else _num(kind, d[key])
            parts.append(f'<tr><td>{e(label)}</td>{value}<td class="why">{e(why)}</td></tr>')
        parts.append("</table>")
    if files:
        parts += _figures(d["name"], files, prefix)
    else:
        parts.append(
            f'<p class="note">No charts: they are drawn for the {charted} worst drills '
            "(<code>analyze --charts N</code> for more, or analyze this drill's log alone).</p>"
        )
    return parts


def _fleet_section(ranked: Sequence[Mapping[str, Any]], pictures: Mapping[str, Any], total: int) -> list[str]:
    e = html.escape
    labels = {key: label for key, label, _, _ in METRICS}
    kinds = {key: kind for key, _, kind, _ in METRICS}
    parts = ["<h2>Fleet</h2>"]
    for title, file in pictures.get("fleet", []):
        parts.append(f'<figure class="fleet"><img src="{e(file)}" alt="{e(title)}"></figure>')
    shown = f"the {count(len(ranked))} worst shown" if total > len(ranked) else "all shown"
    parts.append(
        f"<h3>Drills, worst first ({count(total)}; {shown})</h3>"
        '<p class="note">Failing drills first, then by overlaps, overlap time, unassigned time and '
        "moves. Each name opens the drill's page.</p>"
    )
    parts.append(
        '<table class="fleet" id="fleet"><tr><th>#</th><th>drill</th><th>verdict</th>'
        + "".join(f'<th title="{e(EXPLAIN[c])}">{e(labels[c])}</th>' for c in FLEET_COLUMNS)
        + "<th>duration</th></tr>"
    )
    for rank, d in enumerate(ranked, 1):
        cls = "" if d["ok"] else ' class="failed"'
        verdict = "ok" if d["ok"] else f'<span class="bad">{e(_failures(d))}</span>'
        parts.append(
            f'<tr{cls}><td class="num">{rank}</td>'
            f'<td><a href="{e(drill_page_name(rank, d["name"]))}">{e(d["name"])}</a></td><td>{verdict}</td>'
            + "".join(_num(kinds[c], d[c]) for c in FLEET_COLUMNS)
            + _num("ms", d["end_ms"])
            + "</tr>"
        )
    parts.append("</table>")
    if total > len(ranked):
        parts.append(
            f'<p class="note">{count(total - len(ranked))} more drills (the best ones) are in '
            '<a href="summary.json">summary.json</a> and <a href="drills.parquet/">drills.parquet</a>.</p>'
        )
    return parts


def render(doc: Mapping[str, Any], drills: Sequence[Mapping[str, Any]], pictures: Mapping[str, Any]) -> str:
    """``index.html``: verdict, summary table, data links, fleet section (fleets), worst drill's charts."""
    e = html.escape
    charted = pictures.get("drills", {})
    parts = [*_head("connect-bridge drill analysis"), "<h1>Drill analysis</h1>", _verdict(doc)]
    parts += _glance(drills, pictures.get("pauses", {}))
    parts.append("<h2>Summary</h2>")
    parts.append(summary_table(doc, drills))
    parts.append(
        '<p class="note">Data: <a href="summary.json">summary.json</a>'
        + "".join(f' · <a href="{e(name)}/">{e(name)}</a>' for name in TABLES)
        + "</p>"
    )
    ranked = worst_first(drills)
    if len(drills) > 1:
        parts += _fleet_section(ranked[:FLEET_ROWS], pictures, len(drills))
    first = next((d for d in ranked if d["name"] in charted), None)
    if first is not None:
        title = first["name"] if len(drills) == 1 else f"Worst drill: {first['name']}"
        anchor = "drill-" + slug(first["name"])
        parts.append(f'<h2 id="{e(anchor)}">{e(title)}</h2>')
        parts += _drill_section(first, charted[first["name"]], "", len(charted), table=len(drills) > 1)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_drill(
    d: Mapping[str, Any],
    rank: int,
    total: int,
    files: Any,
    charted: int,
    pauses: Sequence[Pause] | None = None,
) -> str:
    """A drill's own page (``drills/NNNN-NAME.html``): its longest pause and rebalance pauses (when
    charted), its numbers, explained, and its charts."""
    e = html.escape
    glance = _glance([d], {d["name"]: pauses}) if pauses is not None else []
    parts = [
        *_head(f"{d['name']}: drill analysis"),
        '<p><a href="../index.html">← all drills</a></p>',
        f"<h1>{e(d['name'])}</h1>",
        f'<p class="note">Drill {rank} of {count(total)}, worst first.</p>',
        *glance,
        *_drill_section(d, files, "../", charted),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_index(
    out: Path, doc: Mapping[str, Any], drills: Sequence[Mapping[str, Any]], pictures: Mapping[str, Any]
) -> Path:
    """Write ``index.html`` and, for a fleet, the pages of the drills its table lists."""
    path = out / "index.html"
    path.write_text(render(doc, drills, pictures), encoding="utf-8")
    if len(drills) > 1:
        charted = pictures.get("drills", {})
        pages = out / DRILL_DIR
        pages.mkdir(parents=True, exist_ok=True)
        for stale in pages.glob("*.html"):  # an earlier run's drills would be linked from nowhere
            stale.unlink()
        for rank, d in enumerate(worst_first(drills)[:FLEET_ROWS], 1):
            pauses = pictures.get("pauses", {}).get(d["name"])
            page = render_drill(d, rank, len(drills), charted.get(d["name"]), len(charted), pauses)
            (out / drill_page_name(rank, d["name"])).write_text(page, encoding="utf-8")
    return path
