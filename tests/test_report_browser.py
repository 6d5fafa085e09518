"""The ``analyze`` report renders in a real browser: headless Chromium screenshots ``index.html``.

Needs Debian's ``chromium`` at /usr/bin/chromium (``.ci/run`` installs it); without it the test
fails rather than skips, so CI cannot pass without having looked at the page. The screenshot must
show the page with its charts drawn: not one flat colour, and with the charts' coloured marks
(matplotlib's blue and orange series), which the text and tables of the page do not have in that
quantity. Set ``REPORT_SCREENSHOT=path.png`` to keep the screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

from connect_bridge.drills.events import EventLog
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline.analyze import analyze

CHROMIUM = "/usr/bin/chromium"
WINDOW = (1280, 2000)


def _chromium_screenshot(page: Path, png: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_report_renders_in_headless_chromium(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
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
        log: EventLog = run_scenario(scenario)
        log.write_jsonl(directory / "events.jsonl")
    out = tmp_path / "report"
    doc = analyze([drills], out, spark=spark, chart_drills=3)
    assert doc["totals"]["drills"] == 3

    page = out / "index.html"
    html = page.read_text(encoding="utf-8")
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) == 2 + 3 * 3, images  # fleet histograms + 3 charts per drill
    for src in images:
        assert not re.match(r"[a-z]+:", src), f"not a relative link: {src}"
        assert (out / src).is_file() and (out / src).stat().st_size > 1000, src

    png = tmp_path / "screenshot.png"
    result = _chromium_screenshot(page, png, tmp_path / "chromium-profile")
    assert png.is_file(), f"chromium wrote no screenshot (exit {result.returncode}): {result.stderr[-2000:]}"
    keep = os.environ.get("REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)
    assert png.stat().st_size > 20_000

    pixels = mpimg.imread(str(png))[..., :3]  # floats in 0..1
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    flat = pixels.reshape(-1, 3)
    assert flat.std(axis=0).max() > 0.05, "the screenshot is one flat colour"
    colours = np.unique((flat * 255).astype(np.uint8), axis=0)
    assert len(colours) > 200, f"only {len(colours)} colours: the charts did not render"
    # the charts' series: saturated pixels (text is black/grey; links are a thin blue)
    saturation = flat.max(axis=1) - flat.min(axis=1)
    assert (saturation > 0.3).mean() > 0.005, "no coloured chart marks in the screenshot"
