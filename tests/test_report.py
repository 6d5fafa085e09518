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

from connect_bridge.pipeline import charts, report
from connect_bridge.pipeline.analyze import summary_doc, totals
from connect_bridge.pipeline.pauses import rebalance_pauses

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
        "longest_unassigned_ms": 1500,
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


def _run(connector: str, task: int, worker: str, start: int, end: int) -> dict[str, Any]:
    return {"connector": connector, "task": task, "kind": "run", "worker": worker, "start_ms": start,
            "end_ms": end, "items": 3}  # fmt: skip


def _gap(connector: str, task: int, start: int, end: int) -> dict[str, Any]:
    return {"connector": connector, "task": task, "kind": "unassigned", "worker": None, "start_ms": start,
            "end_ms": end, "items": 3}  # fmt: skip


REBALANCE_ROWS = [
    # w2 crashes at 100 s: its two tasks run nowhere, then on w1 (one after 3 s, one after 5 s);
    # w1's own task stops and restarts on w1 (an eager rebalance) after 1 s.
    _run("c", 0, "w1", 0, 100_000), _gap("c", 0, 100_000, 101_000), _run("c", 0, "w1", 101_000, 540_000),
    _run("c", 1, "w2", 0, 100_000), _gap("c", 1, 100_000, 103_000), _run("c", 1, "w1", 103_000, 540_000),
    _run("c", 2, "w2", 0, 100_500), _gap("c", 2, 100_500, 105_500), _run("c", 2, "w1", 105_500, 540_000),
    # a later, separate 200 ms pause of task 0 alone
    _gap("c", 0, 300_000, 300_200),
]  # fmt: skip
ACTIONS = [
    {"seq": 5, "t_ms": 99_000, "kind": "crash", "worker": "w2", "detail": "sessioned", "total": 2},
    {"seq": 9, "t_ms": 299_000, "kind": "upgrade", "worker": "w1", "detail": "eager → new", "total": 2},
]


def test_rebalance_pauses_say_how_long_work_stopped_and_who_moved() -> None:
    first, second = rebalance_pauses(REBALANCE_ROWS, ACTIONS)
    assert (first.start_ms, first.end_ms, first.longest_ms, first.longest_item, first.items) == (
        100_000,
        105_500,
        5_000,
        ("c", 2),
        3,
    )
    assert first.moved == (("w2", "w1", 2), ("w1", "w1", 1)) and first.trigger == "crash w2"
    assert (second.longest_ms, second.items, second.trigger) == (200, 1, "upgrade w1 eager → new")


def test_page_leads_with_the_longest_pause_and_the_rebalances() -> None:
    drill = _drill("only", longest_unassigned_ms=5_000)
    pauses = {"only": rebalance_pauses(REBALANCE_ROWS, ACTIONS)}
    pictures = {"drills": {"only": [("timeline", "t.png")]}, "pauses": pauses}
    page = report.render(_doc([drill]), [drill], pictures)
    glance = page.index('id="glance"')
    assert glance < page.index('id="summary"') and glance < page.index("<img")
    head = page[glance : page.index("</div>", glance)]
    assert "5.0 s</span> longest time a task ran nowhere: c task 2 from 100.0 s, after crash w2" in head
    rows = re.findall(r"<tr( class=\"worst\")?><td class=\"num\">([^<]+)</td><td>([^<]+)</td>", head)
    assert [(bool(w), at, after) for w, at, after in rows] == [
        (True, "100.0 s", "crash w2"),
        (False, "300.0 s", "upgrade w1 eager → new"),
    ]
    assert "w2 → w1 ×2, w1 → w1 ×1 (in place)" in head and ">200 ms<" in head


def test_fleet_glance_names_the_drill_with_the_longest_pause() -> None:
    drills = [_drill("a", longest_unassigned_ms=900), _drill("b", longest_unassigned_ms=61_000)]
    page = report.render(_doc(drills), drills, {})
    assert "61.0 s</span> longest time a task ran nowhere in drill <b>b</b>" in page
    assert _doc(drills)["totals"]["longest_unassigned_ms"] == 61_000
    assert "The largest of any drill." in page


def test_a_single_drill_has_its_numbers_in_one_table_and_no_worked_example() -> None:
    drill = _drill("only")
    page = report.render(_doc([drill]), [drill], {"drills": {"only": [("timeline", "t.png")]}})
    assert page.count("<th>metric</th>") == 1, "the drill's numbers are shown twice"
    for _, _, _, why in report.METRICS:
        assert "=" not in why and not re.search(r"\d+ (items|s)\b", why), why


def test_ownership_chart_colours_protocols_and_shows_short_pauses(tmp_path: Path) -> None:
    """A 200 ms pause on a 540 s axis is a visible band, not a sliver, and each run carries its
    worker's protocol colour."""
    import matplotlib.image as mpimg
    import numpy as np

    starts = [{"seq": 1, "t_ms": 0, "worker": "w1", "protocol": "eager"},
              {"seq": 2, "t_ms": 0, "worker": "w2", "protocol": "sessioned"},
              {"seq": 10, "t_ms": 299_000, "worker": "w1", "protocol": "new"}]  # fmt: skip
    rows = [r for r in REBALANCE_ROWS if r["start_ms"] < 300_000] + [_gap("c", 0, 300_000, 300_200)]
    pauses = rebalance_pauses(rows, ACTIONS)
    png = tmp_path / "ownership.png"
    colours = charts.worker_colours(["w1", "w2"])
    charts.draw_ownership(png, "d", 540_000, rows, colours, starts, pauses)
    pixels = (mpimg.imread(str(png))[..., :3] * 255).round().astype(int)

    def share(hex_colour: str) -> int:
        rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(pixels - rgb).max(axis=2) <= 2).sum())

    for protocol in ("eager", "sessioned"):
        assert share(charts.PROTOCOL_COLOURS[protocol]) > 200, protocol
    shade = 255 - round(0.25 * (255 - int(charts.GAP_GREY[1:3], 16)))
    columns = (np.abs(pixels - shade).max(axis=2) <= 3).sum(axis=0) > 40
    assert columns.sum() >= 2 * 4, f"pauses drawn {columns.sum()} px wide in all"
