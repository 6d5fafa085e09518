"""The ``analyze`` report renders in a real browser: headless Chromium loads ``index.html``.

Needs Debian's ``chromium`` at /usr/bin/chromium (``.ci/run`` installs it); without it the test
fails rather than skips, so CI cannot pass without having looked at the page. Looks at a fleet
of four drills (three random ones and a hand-made one with an overlap and every kind of scenario
action):

- a screenshot of the fleet page (``index.html``) at 1280x2000, which must show the page with its
  charts drawn (not one flat colour, with the charts' coloured marks, which the text and tables of
  the page do not have in that quantity) and the worst-first fleet table inside the picture;
- a screenshot of the worst drill's own page, as tall as that page, in which both its timeline and
  its ownership chart lie (a 2000 px window cuts the ownership chart off);
- the laid-out pages, measured by a script in a wrapper page that frames the report
  (``--dump-dom`` prints what it found): the summary table, the worst drill's timeline and
  ownership charts loaded and as wide as the page's content, the fleet table worst first with a
  working link per drill, and where each of those elements lies.

- the **first screen** (1280x800) of ``index.html``: the longest time a task ran nowhere and the
  worst drill's rebalance pauses (when, after what, for how long, who moved) lie wholly within it.
  The screenshot is kept (``REPORT_SCREENSHOT``'s directory, else the system's temporary directory,
  ``connect-bridge-report/first-screen.png``) and its path printed in the run's closing summary.

Set ``REPORT_SCREENSHOT=path.png`` to keep the fleet page's screenshot (and ``path-drill.png`` the
drill page's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline.analyze import analyze
from connect_bridge.pipeline.charts import OVERLAP_RED
from report_logs import NAME, write_actions_drill

CHROMIUM = "/usr/bin/chromium"
WINDOW = (1280, 2000)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

PROBE = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="report" src="REPORT" style="width:WIDTHpx;height:HEIGHTpx;border:0"></iframe>
<pre id="probe">not loaded</pre>
<script>
document.getElementById("report").addEventListener("load", function () {
  var d = this.contentDocument, q = function (s) { return d.querySelector(s); };
  var box = function (e) { return e ? Math.round(e.getBoundingClientRect().width) : 0; };
  var where = function (s) {
    var e = q(s), r = e ? e.getBoundingClientRect() : null;
    return r ? {left: r.left, top: r.top, right: r.right, bottom: r.bottom} : null;
  };
  var img = function (s) {
    var e = q(s);
    return e ? {src: e.getAttribute("src"), natural: e.naturalWidth, shown: box(e)} : null;
  };
  var fleet = Array.from(d.querySelectorAll("table.fleet tr")).slice(1).map(function (tr) {
    var a = tr.querySelector("a");
    return {name: a ? a.textContent : null, href: a ? a.getAttribute("href") : null, failed: tr.className};
  });
  document.getElementById("probe").textContent = JSON.stringify({
    content: box(d.body),
    height: d.documentElement.scrollHeight,
    boxes: {timeline: where("figure.timeline img"), ownership: where("figure.ownership img"),
            fleet: where("table.fleet"), glance: where("#glance")},
    pauses: d.querySelectorAll("table.pauses tr").length - 1,
    glance: q("#glance") ? q("#glance").textContent : null,
    summary: Array.from(d.querySelectorAll("table.summary tr td:first-child")).map(function (e) {
      return e.textContent;
    }),
    timeline: img("figure.timeline img"),
    ownership: img("figure.ownership img"),
    fleet: fleet
  });
});
</script></body></html>
"""


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _layout(page: Path, tmp_path: Path, window: tuple[int, int] = WINDOW) -> dict:  # type: ignore[type-arg]
    """What the probe page measured in the report, as laid out in a window of ``window`` (CSS px;
    element boxes relative to the top left of the page, unscrolled)."""
    probe = page.parent / "probe.html"
    probe.write_text(
        PROBE.replace("REPORT", page.name).replace("WIDTH", str(window[0])).replace("HEIGHT", str(window[1])),
        encoding="utf-8",
    )
    result = _chromium(
        tmp_path / "chromium-probe",
        "--allow-file-access-from-files",
        "--virtual-time-budget=10000",
        f"--window-size={window[0]},{window[1]}",
        "--dump-dom",
        probe.as_uri(),
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"chromium printed no probe (exit {result.returncode}): {result.stderr[-2000:]}"
    text = found.group(1).replace("&quot;", '"').replace("&amp;", "&")
    assert text.startswith("{"), f"the report did not load in the frame: {text}"
    return json.loads(text)


def _screenshot(page: Path, png: Path, window: tuple[int, int], profile: Path) -> Any:
    """Chromium's screenshot of ``page`` in a ``window`` (width, height) window, as RGB floats."""
    import matplotlib.image as mpimg

    size = f"--window-size={window[0]},{window[1]}"
    result = _chromium(profile, f"--screenshot={png}", size, page.as_uri())
    assert png.is_file(), f"chromium wrote no screenshot (exit {result.returncode}): {result.stderr[-2000:]}"
    pixels = mpimg.imread(str(png))[..., :3]  # floats in 0..1
    assert pixels.shape[:2] == (window[1], window[0])
    return pixels


def _inside(box: dict[str, float] | None, window: tuple[int, int]) -> bool:
    """Whether an element's box lies wholly within a screenshot of ``window``."""
    return (
        box is not None
        and box["left"] >= 0
        and box["top"] >= 0
        and (box["right"] <= window[0] and box["bottom"] <= window[1])
    )


def _coloured(pixels: Any, box: dict[str, float]) -> float:
    """The share of strongly coloured pixels inside ``box`` of a screenshot (a chart's marks)."""
    region = pixels[int(box["top"]) : int(box["bottom"]), int(box["left"]) : int(box["right"])]
    flat = region.reshape(-1, 3)
    return float(((flat.max(axis=1) - flat.min(axis=1)) > 0.3).mean())


FIRST_SCREEN = (1280, 800)


def test_report_renders_in_headless_chromium(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, keep_artifact
) -> None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium "
            "(`apt-get install -y chromium`, as .ci/run does)",
            pytrace=False,
        )
    import matplotlib.image as mpimg
    import numpy as np

    drills = tmp_path / "drills"
    for seed in (3, 4, 5):
        scenario = random_scenario(seed)
        directory = drills / scenario.name
        directory.mkdir(parents=True)
        run_scenario(scenario).write_jsonl(directory / "events.jsonl")
    write_actions_drill(drills)
    out = tmp_path / "report"
    doc = analyze([drills], out, spark=spark, chart_drills=2)
    assert doc["totals"]["drills"] == 4 and doc["totals"]["ok"] == 3

    page = out / "index.html"
    html = page.read_text(encoding="utf-8")
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) == 3, images  # fleet histograms + the worst drill's timeline and ownership
    for src in images:
        assert not re.match(r"[a-z]+:", src), f"not a relative link: {src}"
        assert (out / src).is_file() and (out / src).stat().st_size > 1000, src

    # the overlap of the hand-made drill is red in its ownership chart
    ownership = mpimg.imread(str(out / "charts" / f"00-{NAME}-ownership.png"))[..., :3]
    red = np.array([int(OVERLAP_RED[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    assert (np.abs(ownership - red).max(axis=2) < 0.02).sum() > 50, "no red overlap in the ownership chart"

    png = tmp_path / "screenshot.png"
    pixels = _screenshot(page, png, WINDOW, tmp_path / "chromium-profile")
    keep = os.environ.get("REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)
    assert png.stat().st_size > 20_000
    flat = pixels.reshape(-1, 3)
    assert flat.std(axis=0).max() > 0.05, "the screenshot is one flat colour"
    colours = np.unique((flat * 255).astype(np.uint8), axis=0)
    assert len(colours) > 200, f"only {len(colours)} colours: the charts did not render"
    saturation = flat.max(axis=1) - flat.min(axis=1)
    assert (saturation > 0.3).mean() > 0.005, "no coloured chart marks in the screenshot"

    # The first screen: what an operator looks for, before any scrolling.
    first = Path(keep).parent if keep else Path(tempfile.gettempdir()) / "connect-bridge-report"
    first.mkdir(parents=True, exist_ok=True)
    first_png = first / "first-screen.png"
    first_pixels = _screenshot(page, first_png, FIRST_SCREEN, tmp_path / "chromium-profile")
    assert first_pixels.reshape(-1, 3).std(axis=0).max() > 0.05, "the first screen is one flat colour"
    keep_artifact("report first screen", first_png)
    print(f"report first screen: {first_png}")
    at_first = _layout(page, tmp_path, FIRST_SCREEN)
    box = at_first["boxes"]["glance"]
    assert _inside(box, FIRST_SCREEN), f"the glance block is not all in the first screen: {box}"
    glance = " ".join(at_first["glance"].split())
    assert "longest time a task ran nowhere" in glance, glance
    assert f"Rebalance pauses of {NAME}" in glance, glance  # the worst drill: the hand-made one
    assert at_first["pauses"] >= 1 and "→" in glance, glance

    layout = _layout(page, tmp_path)
    assert {"ok", "overlaps", "overlap time", "unassigned item time", "drills"} <= set(layout["summary"])
    assert "longest time a task ran nowhere" in layout["summary"]
    content = layout["content"]
    assert content > 0.8 * WINDOW[0], layout
    for chart in ("timeline", "ownership"):
        shown = layout[chart]
        assert shown and shown["src"].startswith("charts/00-" + NAME), layout
        assert shown["natural"] >= 1000, f"{chart} did not load: {shown}"
        assert shown["shown"] >= 0.95 * content, f"{chart} is not at the page's width: {shown}, {content}"
    assert _inside(layout["boxes"]["fleet"], WINDOW), f"the fleet table is not in the screenshot: {layout}"
    rows = layout["fleet"]
    assert rows[0]["name"] == NAME and rows[0]["failed"] == "failed", rows
    assert sorted(r["name"] for r in rows) == sorted(d["name"] for d in doc["drills"])
    assert all(r["failed"] == "" for r in rows[1:]), rows
    for row in rows:
        target = out / row["href"]
        assert target.is_file(), row
        assert f"<h1>{row['name']}</h1>" in target.read_text(encoding="utf-8")

    # The worst drill's own page, in a window as tall as the page: its timeline and its ownership
    # chart are both in the screenshot, drawn (a chart's coloured marks inside each box).
    drill_page = out / rows[0]["href"]
    drill_layout = _layout(drill_page, tmp_path)
    tall = (WINDOW[0], max(WINDOW[1], drill_layout["height"]))
    if tall != WINDOW:  # measured again in the window of the screenshot
        drill_layout = _layout(drill_page, tmp_path, tall)
    drill_png = tmp_path / "drill-screenshot.png"
    drill_pixels = _screenshot(drill_page, drill_png, tall, tmp_path / "chromium-profile")
    if keep:
        shutil.copyfile(drill_png, Path(keep).with_name(Path(keep).stem + "-drill.png"))
    for chart in ("timeline", "ownership"):
        box = drill_layout["boxes"][chart]
        assert _inside(box, tall), f"the {chart} chart is not in the drill page's screenshot: {box}, {tall}"
        assert _coloured(drill_pixels, box) > 0.003, f"the {chart} chart is not drawn in the screenshot"
