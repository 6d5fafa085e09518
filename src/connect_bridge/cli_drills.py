"""The drill and analysis sub-commands of ``connect-bridge`` (``drill run/fleet/search``, ``analyze``).

Apart from ``cli.py`` (the parser and the command table) as ``cli_bridge.py`` holds the bridge-side
commands; each returns the exit code and reports everyday failures in one line (``fail``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from connect_bridge import logs
from connect_bridge.cli_common import fail, out_problem
from connect_bridge.cli_interrupt import OutState, run_interruptible


def _bars(args: argparse.Namespace) -> bool:
    """Progress bars are INFO-level output: ``-q`` (or ``--log-level warning``) hides them too."""
    return logs.LEVELS[args.log_level] <= logging.INFO


def _stages(args: argparse.Namespace, desc: str, total: int | None = None) -> Any:
    """A bar for a command that reports ``progress(message)`` stages (analyze, drill fleet)."""
    from connect_bridge.progress import Bar

    return Bar(desc, total, unit=" drills" if total is not None else "it", enabled=_bars(args), plain=True)


def cmd_drill_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from connect_bridge.drills.checker import check
    from connect_bridge.drills.scenario import ScenarioError, load_scenario
    from connect_bridge.drills.sim import run_scenario
    from connect_bridge.progress import Bar, ScheduleClock, simulated_time

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        return fail(str(exc))
    if (problem := out_problem(args)) is not None:
        return fail(problem)
    out = Path(args.out)
    if args.mode == "live":
        from connect_bridge.drills.live import run_live

        schedule = ScheduleClock(scenario.end_ms // 1000)
        live_bar = Bar(
            f"{scenario.name} (live)",
            schedule.end_s,
            unit="s",
            enabled=_bars(args),
            plain=True,
            clock=schedule,
        )
        with live_bar as bar:

            def show(done: int, total: int, step: str) -> None:
                schedule.start()  # the first step is told once the bridge is up: t = 0
                bar.update_to(schedule())
                bar.step(f"{done}/{total} steps, next: {step}")

            try:
                events = run_live(scenario, out, progress=show)
            except (OSError, RuntimeError) as exc:
                return fail(f"live drill failed: {exc}")
    else:
        sim_bar = Bar(f"{scenario.name} (simulated)", scenario.end_ms // 1000, unit="s", enabled=_bars(args))
        with sim_bar as bar:
            events = run_scenario(scenario, progress=simulated_time(bar))
    events.write_jsonl(out / "events.jsonl")
    summary = check(events.events, name=scenario.name, end_ms=scenario.end_ms)
    doc = summary.to_json()
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(
        json.dumps(
            {
                k: doc[k]
                for k in ("name", "ok", "exclusive", "converged", "balanced", "moves", "rebalances", "events")
            }
        )
    )
    for line in getattr(summary, "violations", ())[:10]:
        print(f"violation: {line}", file=sys.stderr)
    return 0 if summary.ok else 1


def cmd_drill_fleet(args: argparse.Namespace) -> int:
    from connect_bridge.pipeline.extras import spark_missing

    if (missing := spark_missing("drill fleet")) is not None:
        return fail(missing)
    if args.count < 1:
        return fail("drill fleet: --count must be at least 1")
    before = OutState(args.out)
    if (problem := out_problem(args)) is not None:
        return fail(problem)
    if args.checks_only or args.adversarial:
        return run_interruptible(lambda: _fleet_checks(args), before)
    return run_interruptible(lambda: _fleet(args), before)


def _fleet(args: argparse.Namespace) -> int:
    """``drill fleet``: the drills' events, then ``analyze`` over them."""
    from connect_bridge.drills.events import EventLogError
    from connect_bridge.pipeline.analyze import AnalyzeError
    from connect_bridge.pipeline.fleet import run_fleet
    from connect_bridge.progress import StageReporter, counted

    try:
        with _stages(args, "drill fleet", args.count) as bar:
            progress = StageReporter(bar)
            fleet = run_fleet(
                args.count, args.seed, args.out, master=args.master, progress=progress, engine=args.engine
            )
    except (AnalyzeError, EventLogError, ValueError) as exc:
        return fail(f"drill fleet: {exc}")
    failed = fleet["failed"]
    t = fleet["totals"]
    print(
        f"fleet: {counted(fleet['count'], 'drill')} (seed {fleet['seed']}), "
        f"{counted(fleet['events'], 'event')}: "
        f"{t['ok']} ok, {len(failed)} failed, {t['overlaps']} overlaps, {t['moves']} moves; "
        f"engine {fleet['engine']}; report {fleet['report']}"
    )
    for entry in failed[:20]:
        where = entry["scenario"] or "(not regenerated)"
        print(
            f"failed: {entry['name']}: replay with `connect-bridge drill run {args.out}/{where} --out DIR`",
            file=sys.stderr,
        )
    return 1 if failed or fleet["missing_drills"] else 0


def cmd_drill_search(args: argparse.Namespace) -> int:
    """Random drills until ``--count`` seeds ran; failures are minimized into ``--out``."""
    from functools import partial

    from connect_bridge.drills.generate import ALL_PROTOCOLS, random_scenario
    from connect_bridge.drills.search import keep, search

    protocols = tuple(args.protocols.split(",")) if args.protocols else ALL_PROTOCOLS
    unknown = sorted(set(protocols) - set(ALL_PROTOCOLS))
    if unknown:
        return fail(f"drill search: unknown protocol(s) {', '.join(unknown)}; use {','.join(ALL_PROTOCOLS)}")
    if (problem := out_problem(args, collect=True)) is not None:  # a collection: non-empty is normal
        return fail(problem)
    generator = partial(random_scenario, protocols=protocols, adversarial=args.adversarial)
    seeds = range(args.seed, args.seed + args.count)
    found: dict[str, int] = {}
    for failure in search(seeds, generator):
        path = keep(failure, args.out, budget=args.budget)
        found[failure.invariant] = found.get(failure.invariant, 0) + 1
        print(f"seed {failure.seed}: {failure.invariant}: {failure.violation} -> {path}")
    print(json.dumps({"drills": args.count, "failures": sum(found.values()), "by_invariant": found}))
    return 1 if found else 0


def _fleet_checks(args: argparse.Namespace) -> int:
    """``drill fleet --checks-only`` / ``--adversarial``: verdicts only, judged in the executors."""
    from connect_bridge.pipeline.fleet import run_fleet_checks
    from connect_bridge.progress import StageReporter, counted

    try:
        with _stages(args, "drill fleet", args.count) as bar:
            fleet = run_fleet_checks(
                args.count,
                args.seed,
                args.out,
                adversarial=args.adversarial,
                master=args.master,
                progress=StageReporter(bar),
                engine=args.engine,
            )
    except ValueError as exc:
        return fail(f"drill fleet: {exc}")
    v = fleet["violations"]
    print(
        f"fleet: {counted(fleet['drills'], ('adversarial ' if fleet['adversarial'] else '') + 'drill')} "
        f"(seed {fleet['seed']}) "
        f"in {fleet['seconds']} s ({fleet['drills_per_s']}/s): {fleet['failed_drills']} failed; "
        f"violations exclusive={v['exclusive']} live={v['live']} converged={v['converged']} "
        f"balanced={v['balanced']}; longest unowned {fleet['max_unowned_ms']} ms; engine {fleet['engine']}"
    )
    # A drill's seed is its scenario seed: `drill search` of that one seed runs the same drill and
    # minimizes it into a regression scenario.
    search_kind = " --adversarial" if fleet["adversarial"] else ""
    for entry in fleet["failed"][:20]:
        print(
            f"failed: {entry['name']}: {entry['violation']}; replay with "
            f"`connect-bridge drill run {args.out}/{entry['scenario']} --out DIR`, minimize with "
            f"`connect-bridge drill search --count 1 --seed {entry['seed']}{search_kind} --out DIR`",
            file=sys.stderr,
        )
    keys = ("count", "seconds", "drills_per_s", "violations", "failed_drills", "engine")
    print(json.dumps({k: fleet[k] for k in keys}))
    return 1 if fleet["failed_drills"] else 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from connect_bridge.pipeline.extras import spark_missing

    if (missing := spark_missing("analyze")) is not None:
        return fail(missing)
    from connect_bridge.drills.events import EventLogError
    from connect_bridge.pipeline.analyze import AnalyzeError, analyze, find_inputs
    from connect_bridge.progress import StageReporter

    try:
        find_inputs(args.paths)  # fail fast, before starting Spark
    except (AnalyzeError, EventLogError) as exc:
        return fail(f"analyze: {exc}")
    before = OutState(args.out)
    if (problem := out_problem(args)) is not None:
        return fail(problem)

    def work() -> int:
        try:
            with _stages(args, "analyze") as bar:
                progress = StageReporter(bar)
                doc = analyze(
                    args.paths, args.out, master=args.master, chart_drills=args.charts, progress=progress
                )
        except (AnalyzeError, EventLogError) as exc:
            return fail(f"analyze: {exc}")
        print(json.dumps({k: v for k, v in doc["totals"].items() if k != "not_ok"}))
        return 0

    return run_interruptible(work, before)


__all__ = ["cmd_analyze", "cmd_drill_fleet", "cmd_drill_run", "cmd_drill_search"]
