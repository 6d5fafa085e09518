"""The guide agrees with itself and with the repository: README.md and docs/ speak of what is built,
and nothing in the repository needs a folder beside the checkout.

- No page speaks of the work's history instead of the code ("issue 16", "not built yet"): an
  operator reads such a line as a plan, and plans a full stop for something that exists.
- No page, module or test points at the design notes, vectors or specifications that lived in a
  ``shared`` folder beside the checkout (``../shared``, ``DESIGN.md``, ``seeds/000``, a "research
  note"): a clone and the wheel have none of them. Their content is in docs/ (architecture.md,
  cli.md, drills.md, pipeline.md, connect-protocol.md) and tests/data/.
- The contract pages list what the code has: every scenario action, every event type the runners
  write, every ``summary.json`` key, every command; the scenario example loads.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from connect_bridge.cli import build_parser
from connect_bridge.drills import events as drill_events
from connect_bridge.drills.checker import Summary
from connect_bridge.drills.scenario import STEP_MODELS, load_scenario

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

STALE_PHRASES: tuple[tuple[str, str], ...] = (
    (r"(?<!known-)\b[Ii]ssues? ?#?\d+\b", "speaks of an issue"),
    (r"(?i)\bnot yet built\b|\bnot built yet\b|\bis not built\b", "speaks of work not built"),
    (r"(?i)\buntil (issue|wave)\b", "speaks of a plan"),
    (r"(?i)\bwave \d\b", "speaks of a wave of work"),
)
"""Phrases about the history of the work, not about the code (README.md and docs/)."""
OUTSIDE_THE_REPOSITORY: tuple[tuple[str, str], ...] = (
    (r"\.\./shared\b|\bshared/(vectors|research|seeds|DESIGN)", "points at the shared folder"),
    (r"\bDESIGN(\.md)?\b", "points at DESIGN.md"),
    (r"\bseeds/\d|\bresearch/[a-z-]+\.md|\bresearch note\b", "points at a document outside the repo"),
)
"""References to what is not in a clone (everywhere: pages, code, tests, CI)."""
SELF = Path(__file__).resolve()
PATTERN_HOLDERS = {SELF, REPO / "tests" / "test_cli_habits.py"}
"""Files that hold these names as patterns to refuse, not as references."""


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def repository_texts() -> list[Path]:
    """Every text file a clone has that could point outside it (sources, tests, docs, CI, deploy)."""
    roots = ("src", "tests", "docs", "benchmarks", "examples", "deploy", "jvm", ".ci")
    suffixes = {".py", ".md", ".json", ".java", ".yaml", ".yml", ".toml", ".xml", ".properties", ""}
    found = [REPO / "README.md", REPO / "pyproject.toml"]
    for root in roots:
        for path in sorted((REPO / root).rglob("*")):
            if (
                path.is_file()
                and not path.is_symlink()
                and path.suffix in suffixes
                and "__pycache__" not in path.parts
                and not any(part.endswith(".egg-info") or part == "target" for part in path.parts)
                and path.resolve() not in PATTERN_HOLDERS
                and path.stat().st_size < 2_000_000
            ):
                found.append(path)
    return found


def findings(paths: list[Path], table: tuple[tuple[str, str], ...]) -> list[str]:
    """``FILE:LINE: what: the line`` for every match of the table's patterns."""
    out = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for pattern, what in table:
                if re.search(pattern, line):
                    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                    out.append(f"{shown}:{number}: {what}: {line.strip()[:120]}")
    return out


def test_no_page_speaks_of_issues_or_of_work_not_built() -> None:
    assert findings(pages(), STALE_PHRASES) == []


def test_nothing_points_outside_the_repository() -> None:
    paths = repository_texts()
    assert len(paths) > 100
    assert findings(paths, OUTSIDE_THE_REPOSITORY) == []


@pytest.mark.parametrize(
    ("line", "table"),
    [
        ("Stop all, repoint, start, until issue 16.", STALE_PHRASES),
        ("Adoption is not built yet.", STALE_PHRASES),
        ("Issue 15 puts the bridge in front of production clusters", STALE_PHRASES),
        ("The tests read the golden vectors from `../shared/vectors`.", OUTSIDE_THE_REPOSITORY),
        ("The sub-commands and their flags are DESIGN.md §4.1", OUTSIDE_THE_REPOSITORY),
        ("See DESIGN §4.3.", OUTSIDE_THE_REPOSITORY),
        ("the draft (`seeds/000`)", OUTSIDE_THE_REPOSITORY),
    ],
)
def test_a_stale_line_is_found(tmp_path: Path, line: str, table: tuple[tuple[str, str], ...]) -> None:
    """The check itself: each kind of line it exists for is reported."""
    page = tmp_path / "page.md"
    page.write_text(f"# probe\n\n{line}\n", encoding="utf-8")
    assert findings([page], table), line


# --- the contract pages list what the code has ------------------------------------------------------


def _section(page: str, heading: str) -> str:
    """The text of ``## heading`` (up to the next ``## ``) of a page."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 3)
    return text[start : end if end != -1 else len(text)]


def test_the_scenario_contract_lists_every_action_and_its_example_loads() -> None:
    section = _section("drills.md", "Scenario file")
    listed = set(re.findall(r"`([a-z_]+)`", section))
    assert set(STEP_MODELS) <= listed, set(STEP_MODELS) - listed
    example = re.search(r"```json\n(.*?)```", section, re.S)
    assert example is not None
    assert load_scenario(json.loads(example[1])).steps


def test_the_event_log_contract_lists_every_type_the_runners_write() -> None:
    written = set(re.findall(r'self\.emit\(t_ms, "([a-z_]+)"', inspect.getsource(drill_events.EventLog)))
    assert {"run", "release", "config", "drill_end"} <= written
    section = _section("drills.md", "Event log")
    rows = {
        t
        for row in re.findall(r"^\| (`[a-z_]+`(?: / `[a-z_]+`)*) \|", section, re.M)
        for t in re.findall(r"`([a-z_]+)`", row)
    }
    assert written <= rows, written - rows


def test_the_summary_contract_names_every_key() -> None:
    summary = Summary("x", True, True, True, True, 0, 0, 0, 0, 0, 0, notes=("n",)).to_json()
    section = _section("drills.md", "Metrics (checker = pipeline)")
    named = set(re.findall(r"`([a-z_,\s]+)`", section))
    words = {w.strip() for group in named for w in group.split(",")}
    assert set(summary) <= words, set(summary) - words


def test_the_cli_page_lists_every_command() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    section = _section("cli.md", "The commands")
    for name in commands.choices:
        assert re.search(rf"`{name}\b", section), f"docs/cli.md does not list {name}"
