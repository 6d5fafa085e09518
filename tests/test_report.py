"""The ``analyze`` report: number formatting, page structure, and the chart aggregates.

The rendering tests need no Spark (they feed :func:`report.render` collected rows); one Spark test
checks that the scenario's actions and the ownership rows are derived from a hand-made log.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.pipeline import report
from connect_bridge.pipeline.analyze import summary_doc, totals

pytest.importorskip("matplotlib")


def _drill(name: str, **numbers: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "drill": f"key-{name}",
        "name": name,
        "events": 1234,
        "overlaps": 0,
        "overlap_ms": 0,
        "converged": True,
        "balanced": True,
        "moves": 5,
        "rebalances": 3,
        "unassigned_item_ms": 2500,
        "end_ms": 60_000,
        "items": 4,
        "live_workers": 2,
    }
    row.update(numbers)
    row["exclusive"] = row["overlaps"] == 0
    row["ok"] = row["exclusive"] and row["converged"] and row["balanced"]
    return row


def _doc(drills: list[dict[str, Any]]) -> dict[str, Any]:
    return {"drills": [], "totals": totals(drills)}


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "0 ms"), (999, "999 ms"), (1000, "1.0 s"), (12_345, "12.3 s"), (4_200_000, "4,200.0 s")],
)
def test_durations_carry_a_unit(ms: int, text: str) -> None:
    assert report.duration(ms) == text


def test_counts_have_thousands_separators() -> None:
    assert report.count(1234567) == "1,234,567"
    page = report.render(_doc([_drill("a", events=9_876_543)]), [_drill("a", events=9_876_543)], {})
    assert ">9,876,543<" in page and "9876543" not in page


def test_single_drill_has_a_summary_table_and_no_fleet_section() -> None:
    drill = _drill("only", overlaps=2, overlap_ms=1500)
    page = report.render(_doc([drill]), [drill], {"drills": {"only": [("timeline", "charts/t.png")]}})
    table = re.search(r'<table class="summary".*?</table>', page, re.S)
    assert table, page
    for _, label, _, why in report.METRICS:
        assert f"<td>{label}</td>" in table.group(0) and html.escape(why) in table.group(0)
    assert '<td class="num" title="1,500 ms">1.5 s</td>' in table.group(0)
    assert '<td class="num no">no</td>' in table.group(0)  # ok / exclusive
    assert "Fleet" not in page and 'id="fleet"' not in page and "{" not in table.group(0)
    assert '<img src="charts/t.png"' in page


def test_fleet_table_is_worst_first_and_limited(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(report, "FLEET_ROWS", 3)
    drills = [
        _drill("calm"),
        _drill("gappy", unassigned_item_ms=90_000),
        _drill("split", overlaps=1, overlap_ms=10),
        _drill("unbalanced", balanced=False),
        _drill("quiet", unassigned_item_ms=0, moves=0),
    ]
    pictures = {"fleet": [("f", "charts/fleet.png")], "drills": {}}
    doc = _doc(drills)
    report.write_index(tmp_path, doc, drills, pictures)
    page = (tmp_path / "index.html").read_text()
    table = re.search(r'<table class="fleet" id="fleet">.*?</table>', page, re.S)
    assert table, page
    names = re.findall(r'<a href="drills/\d{4}-[^"]+\.html">([^<]+)</a>', table.group(0))
    assert names == ["split", "unbalanced", "gappy"]  # failing first (overlaps before balance), then gaps
    assert "2 more drills" in page and "5; the 3 worst shown" in page
    assert "failed: overlaps" in table.group(0) and "failed: not balanced" in table.group(0)
    pages = sorted(p.name for p in (tmp_path / "drills").glob("*.html"))
    assert pages == ["0001-split.html", "0002-unbalanced.html", "0003-gappy.html"]
    assert "No charts" in (tmp_path / "drills" / "0001-split.html").read_text()
    # a rerun with fewer drills leaves no page of the earlier run behind
    report.write_index(tmp_path, _doc(drills[:2]), drills[:2], pictures)
    assert sorted(p.name for p in (tmp_path / "drills").glob("*.html")) == [
        "0001-gappy.html",
        "0002-calm.html",
    ]


def test_chart_data_marks_every_action_and_the_overlap(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from connect_bridge.pipeline import chartdata
    from connect_bridge.pipeline.analyze import run
    from report_logs import EXPECTED_ACTIONS, NAME, write_actions_drill

    write_actions_drill(tmp_path)
    result = run(spark, [tmp_path])
    assert summary_doc(result)["totals"]["overlaps"] == 1
    key = next(k for k, name in result.names.items() if name == NAME)
    detail = chartdata.collect(result.events, result.metrics, [key])
    acts = detail["actions"][key]
    assert [(a["t_ms"], a["kind"], a["worker"], a["detail"]) for a in acts] == EXPECTED_ACTIONS
    assert {a["total"] for a in acts} == {len(EXPECTED_ACTIONS)}
    rows = detail["ownership"][key]
    overlaps = [
        (r["connector"], r["task"], r["start_ms"], r["end_ms"]) for r in rows if r["kind"] == "overlap"
    ]
    assert overlaps == [("c", 0, 3000, 4000)]
    runs = sorted((r["task"], r["worker"], r["start_ms"], r["end_ms"]) for r in rows if r["kind"] == "run")
    assert (0, "w2", 3000, 7600) in runs and (-1, "w1", 0, 5000) in runs
    gaps = [(r["task"], r["start_ms"], r["end_ms"]) for r in rows if r["kind"] == "unassigned"]
    assert (-1, 5000, 6100) in gaps and (1, 7000, 7100) in gaps
    assert {r["items"] for r in rows} == {3}
    few = chartdata.actions(result.events, [key], limit=2).collect()
    assert [r["kind"] for r in sorted(few, key=lambda r: r["seq"])] == ["join", "stop"]
    assert {r["total"] for r in few} == {len(EXPECTED_ACTIONS)}
