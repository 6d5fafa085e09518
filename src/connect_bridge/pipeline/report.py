"""``index.html`` of ``analyze``: one self-contained page with relative links only."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TABLES = ("drills.parquet", "items.parquet", "intervals.parquet")
COLUMNS = (
    "ok",
    "overlaps",
    "overlap_ms",
    "moves",
    "rebalances",
    "unassigned_item_ms",
    "converged",
    "balanced",
    "events",
)

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.bad td { background: #fde8e8; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.3em 0; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "<b>no</b>"
    return html.escape(str(value))


def render(doc: Mapping[str, Any], drills: Sequence[Mapping[str, Any]], pictures: Mapping[str, Any]) -> str:
    e = html.escape
    t = doc["totals"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>connect-bridge drill analysis</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Drill analysis</h1>",
        f"<p>{t['drills']} drills: {t['ok']} ok, {t['converged']} converged, {t['balanced']} balanced, "
        f"{t['overlaps']} overlaps, {t['moves']} moves, {t['unassigned_item_ms']} unassigned item-ms.</p>",
        '<p>Data: <a href="summary.json">summary.json</a>'
        + "".join(f' · <a href="{e(name)}/">{e(name)}</a>' for name in TABLES)
        + "</p>",
        f"<pre>{e(json.dumps(t, indent=1))}</pre>",
        "<h2>Drills</h2><table><tr><th>drill</th>"
        + "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
        + "<th>charts</th></tr>",
    ]
    charted = pictures.get("drills", {})
    for i, d in enumerate(drills):
        anchor = f"d{i}"
        link = f'<a href="#{anchor}">charts</a>' if d["name"] in charted else ""
        cls = "" if d["ok"] else ' class="bad"'
        parts.append(
            f"<tr{cls}><td>{e(d['name'])}</td>"
            + "".join(f"<td>{_cell(d[c])}</td>" for c in COLUMNS)
            + f"<td>{link}</td></tr>"
        )
    parts.append("</table>")
    parts.append("<h2>Fleet</h2>")
    for title, file in pictures.get("fleet", []):
        parts.append(f'<div><img src="{e(file)}" alt="{e(title)}"></div>')
    index = {d["name"]: i for i, d in enumerate(drills)}
    for name, files in charted.items():
        parts.append(f'<h2 id="d{index[name]}">{e(name)}</h2>')
        for title, file in files:
            parts.append(
                f'<div><a href="{e(file)}"><img src="{e(file)}" alt="{e(name)}: {e(title)}"></a></div>'
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_index(
    out: Path, doc: Mapping[str, Any], drills: Sequence[Mapping[str, Any]], pictures: Mapping[str, Any]
) -> Path:
    path = out / "index.html"
    path.write_text(render(doc, drills, pictures), encoding="utf-8")
    return path
