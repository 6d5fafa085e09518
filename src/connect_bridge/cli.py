"""The ``connect-bridge`` command (DESIGN.md §4.1 is the contract for its sub-commands and flags)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connect_bridge.codecs import connect_protocol
from connect_bridge.codecs.errors import CodecError

_CODEC_KINDS: dict[str, tuple[Callable, Callable, Callable, Callable]] = {
    # kind: (decode, encode, from_json, to_json)
    "subscription": (
        connect_protocol.decode_subscription,
        connect_protocol.encode_subscription,
        connect_protocol.Subscription.from_json,
        connect_protocol.Subscription.to_json,
    ),
    "assignment": (
        connect_protocol.decode_assignment,
        connect_protocol.encode_assignment,
        connect_protocol.Assignment.from_json,
        connect_protocol.Assignment.to_json,
    ),
}


def _fail(message: str) -> int:
    print(f"connect-bridge: {message}", file=sys.stderr)
    return 1


def _cmd_codec(args: argparse.Namespace) -> int:
    decode, encode, from_json, to_json = _CODEC_KINDS[args.kind]
    if args.op == "decode":
        text = "".join(args.data.split())
        try:
            data = bytes.fromhex(text)
        except ValueError as exc:
            return _fail(f"invalid hex input: {exc}")
        try:
            value = decode(data)
        except CodecError as exc:
            return _fail(f"cannot decode {args.kind}: {exc}")
        print(json.dumps(to_json(value), ensure_ascii=False))
        return 0
    if args.version is None:
        return _fail("codec encode needs --version N")
    try:
        doc = json.loads(args.data)
    except json.JSONDecodeError as exc:
        return _fail(f"invalid JSON input at character {exc.pos}: {exc.msg}")
    try:
        print(encode(from_json(doc), args.version).hex())
    except CodecError as exc:
        return _fail(f"cannot encode {args.kind}: {exc}")
    return 0


def _progress_printer(label: str) -> Callable[[int, int], None]:
    """One self-overwriting progress line on stderr (only when stderr is a terminal)."""
    tty = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        if tty:
            pct = 100 * done // max(total, 1)
            bar = "#" * (pct // 4)
            print(f"\r{label} [{bar:<25}] {pct:3d}%", end="" if done < total else "\n", file=sys.stderr)

    return show


def _cmd_drill_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from connect_bridge.drills.checker import check
    from connect_bridge.drills.scenario import ScenarioError, load_scenario
    from connect_bridge.drills.sim import run_scenario

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        return _fail(str(exc))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.mode == "live":
        from connect_bridge.drills.live import run_live

        try:
            log = run_live(scenario, out)
        except (OSError, RuntimeError) as exc:
            return _fail(f"live drill failed: {exc}")
    else:
        log = run_scenario(scenario, progress=_progress_printer(scenario.name))
    log.write_jsonl(out / "events.jsonl")
    summary = check(log.events, name=scenario.name, end_ms=scenario.end_ms)
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


def _cmd_drill_fleet(args: argparse.Namespace) -> int:
    from connect_bridge.drills.events import EventLogError
    from connect_bridge.pipeline.analyze import AnalyzeError, progress_to_stderr
    from connect_bridge.pipeline.fleet import run_fleet

    if args.count < 1:
        return _fail("drill fleet: --count must be at least 1")
    if args.checks_only or args.adversarial:
        return _fleet_checks(args)
    try:
        fleet = run_fleet(args.count, args.seed, args.out, master=args.master, progress=progress_to_stderr)
    except (AnalyzeError, EventLogError) as exc:
        return _fail(f"drill fleet: {exc}")
    failed = fleet["failed"]
    t = fleet["totals"]
    print(
        f"fleet: {fleet['count']} drills (seed {fleet['seed']}), {fleet['events']} events: "
        f"{t['ok']} ok, {len(failed)} failed, {t['overlaps']} overlaps, {t['moves']} moves; "
        f"report {fleet['report']}"
    )
    for entry in failed[:20]:
        where = entry["scenario"] or "(not regenerated)"
        print(
            f"failed: {entry['name']}: replay with `connect-bridge drill run {args.out}/{where} --out DIR`",
            file=sys.stderr,
        )
    return 1 if failed or fleet["missing_drills"] else 0


def _cmd_drill_search(args: argparse.Namespace) -> int:
    """Random drills until ``--count`` seeds ran; failures are minimized into ``--out``."""
    from functools import partial

    from connect_bridge.drills.generate import ALL_PROTOCOLS, random_scenario
    from connect_bridge.drills.search import keep, search

    protocols = tuple(args.protocols.split(",")) if args.protocols else ALL_PROTOCOLS
    unknown = sorted(set(protocols) - set(ALL_PROTOCOLS))
    if unknown:
        return _fail(f"drill search: unknown protocol(s) {', '.join(unknown)}; use {','.join(ALL_PROTOCOLS)}")
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
    from connect_bridge.pipeline.analyze import progress_to_stderr
    from connect_bridge.pipeline.fleet import run_fleet_checks

    fleet = run_fleet_checks(
        args.count,
        args.seed,
        args.out,
        adversarial=args.adversarial,
        master=args.master,
        progress=progress_to_stderr,
    )
    v = fleet["violations"]
    print(
        f"fleet: {fleet['drills']} {'adversarial ' if fleet['adversarial'] else ''}drills "
        f"(seed {fleet['seed']}) "
        f"in {fleet['seconds']} s ({fleet['drills_per_s']}/s): {fleet['failed_drills']} failed; "
        f"violations exclusive={v['exclusive']} live={v['live']} converged={v['converged']} "
        f"balanced={v['balanced']}; longest unowned {fleet['max_unowned_ms']} ms"
    )
    for entry in fleet["failed"][:20]:
        print(
            f"failed: {entry['name']}: {entry['violation']}; replay with "
            f"`connect-bridge drill run {args.out}/{entry['scenario']} --out DIR`",
            file=sys.stderr,
        )
    keys = ("count", "seconds", "drills_per_s", "violations", "failed_drills")
    print(json.dumps({k: fleet[k] for k in keys}))
    return 1 if fleet["failed_drills"] else 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from connect_bridge.bridge import app
    from connect_bridge.bridge.settings import SettingsError, load_settings

    overrides = {
        "listen": args.listen,
        "state_dir": args.state_dir,
        "upstream": args.upstream,
        "metrics_listen": args.metrics_listen,
        "config_view.file": args.config_view,
    }
    try:
        settings = load_settings(Path(args.config) if args.config else None, overrides)
    except SettingsError as exc:
        return _fail(str(exc))
    return app.main(settings)


def _cmd_describe(args: argparse.Namespace) -> int:
    import asyncio

    from connect_bridge.bridge.describe import describe, render_table
    from connect_bridge.bridge.settings import SettingsError, parse_host_port

    try:
        host, port = parse_host_port(args.bootstrap)
    except SettingsError as exc:
        return _fail(f"--bootstrap: {exc}")
    try:
        groups = asyncio.run(describe(host, port, args.group))
    except (OSError, TimeoutError) as exc:
        return _fail(f"cannot describe through {args.bootstrap}: {exc}")
    if args.json:
        print(json.dumps(groups, indent=2))
    else:
        print(render_table(groups))
    return 0 if all(g.get("error_code", 0) == 0 for g in groups) else 1


def _cmd_analyze(args: argparse.Namespace) -> int:
    from connect_bridge.drills.events import EventLogError
    from connect_bridge.pipeline.analyze import AnalyzeError, analyze, find_inputs, progress_to_stderr

    try:
        find_inputs(args.paths)  # fail fast, before starting Spark
        doc = analyze(
            args.paths, args.out, master=args.master, chart_drills=args.charts, progress=progress_to_stderr
        )
    except (AnalyzeError, EventLogError) as exc:
        return _fail(f"analyze: {exc}")
    print(json.dumps({k: v for k, v in doc["totals"].items() if k != "not_ok"}))
    return 0


@dataclass(frozen=True)
class _Arg:
    """One ``add_argument`` call."""

    names: tuple[str, ...]
    options: dict[str, Any]


def _arg(*names: str, **options: Any) -> _Arg:
    return _Arg(names, options)


def _seeds(count_help: str, seed_help: str) -> tuple[_Arg, _Arg]:
    """``--count N --seed S``: the drills of a fleet or a search are seeds ``S...`` (N of them)."""
    return (
        _arg("--count", type=int, required=True, metavar="N", help=count_help),
        _arg("--seed", type=int, default=0, metavar="S", help=seed_help),
    )


@dataclass(frozen=True)
class _Command:
    """A sub-command: ``name`` is its path (``"drill run"`` is ``run`` under :data:`_GROUPS`' drill)."""

    name: str
    help: str
    func: Callable[[argparse.Namespace], int]
    args: tuple[_Arg, ...]


_FLEET_OUT = "output directory (events, report, failed/, fleet.json)"
_COMMANDS: tuple[_Command, ...] = (
    _Command("codec", "decode or encode Connect embedded-protocol payloads", _cmd_codec, (
        _arg("op", choices=("decode", "encode")),
        _arg("--kind", required=True, choices=sorted(_CODEC_KINDS)),
        _arg("--version", type=int, help="protocol version to encode at (encode only)"),
        _arg("data", help="hex bytes (decode) or a JSON document (encode)"),
    )),
    _Command("serve", "run the bridge (embedded default: no upstream, state in ./state)", _cmd_serve, (
        _arg("--config", help="YAML settings file (docs/serve.md)"),
        _arg("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9092)"),
        _arg("--upstream", help="HOST:PORT[,...] of the real brokers (docs/upstream.md)"),
        _arg("--state-dir", help="directory of the record store (default ./state)"),
        _arg("--metrics-listen", help="HOST:PORT for /metrics, /livez, /readyz, or 'off'"),
        _arg("--config-view", help='watched JSON file {"offset": N, "connectors": {"name": tasks}}'),
    )),
    _Command("describe", "describe groups through a running bridge", _cmd_describe, (
        _arg("--bootstrap", required=True, help="HOST:PORT of the bridge"),
        _arg("group", nargs="?", help="group id (default: every group)"),
        _arg("--json", action="store_true", help="machine-readable output"),
    )),
    _Command("drill run", "run one scenario file and check its invariants", _cmd_drill_run, (
        _arg("scenario", help="scenario JSON file (DESIGN.md §4.2)"),
        _arg("--out", required=True, help="output directory for events.jsonl and summary.json"),
        _arg("--mode", choices=("sim", "live"), default="sim"),
    )),
    _Command(
        "drill fleet",
        "run N random drills in Spark executors, then analyze them (docs/pipeline.md)",
        _cmd_drill_fleet,
        (
            *_seeds("number of drills", "fleet seed (default 0)"),
            _arg("--out", required=True, help=_FLEET_OUT),
            _arg("--master", help="Spark master URL (default local[*])"),
            _arg(
                "--adversarial",
                action="store_true",
                help="misbehaving workers (stalls, pauses, partitions, lost answers...); "
                "implies --checks-only",
            ),
            _arg(
                "--checks-only",
                action="store_true",
                help="judge each drill in the executors and keep only verdicts (checks.parquet), "
                "no event table",
            ),
        ),
    ),
    _Command(
        "drill search",
        "run random drills; minimize every failing one into a regression scenario",
        _cmd_drill_search,
        (
            *_seeds("number of seeds to try", "first seed (default 0)"),
            _arg("--adversarial", action="store_true", help="misbehaving workers (docs/drills.md)"),
            _arg("--protocols", metavar="P,...", help="protocols to draw (default all four)"),
            _arg("--budget", type=int, default=400, help="drills spent minimizing each failure"),
            _arg("--out", required=True, help="directory for minimized scenarios (tests/regressions)"),
        ),
    ),
    _Command("analyze", "analyze drill event logs with PySpark (docs/pipeline.md)", _cmd_analyze, (
        _arg("paths", nargs="+", metavar="PATH", help="events.jsonl files, drill directories, fleet Parquet"),
        _arg("--out", required=True, help="output directory (summary.json, Parquet, charts, index.html)"),
        _arg("--master", help="Spark master URL (default local[*])"),
        _arg("--charts", type=int, default=10, metavar="N", help="drills to chart, worst first (default 10)"),
    )),
)  # fmt: skip
"""Every sub-command and its flags (DESIGN.md §4.1), in ``--help`` order."""

_GROUPS: dict[str, tuple[str, str, str]] = {
    "drill": ("run migration drills", "drill_command", "DRILL_COMMAND"),
}
"""Sub-commands with sub-commands of their own: help, ``dest`` and metavar of their choice."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of :data:`_COMMANDS`; each sub-command's ``func`` is what :func:`main` runs."""
    parser = argparse.ArgumentParser(
        prog="connect-bridge",
        description="Online migration bridge for Kafka Connect group membership (classic <-> connect).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, Any] = {}
    for command in _COMMANDS:
        group, _, name = command.name.rpartition(" ")
        where = sub
        if group:
            if group not in groups:
                help_, dest, metavar = _GROUPS[group]
                nested = sub.add_parser(group, help=help_)
                groups[group] = nested.add_subparsers(dest=dest, metavar=metavar, required=True)
            where = groups[group]
        cmd = where.add_parser(name, help=command.help)
        for arg in command.args:
            cmd.add_argument(*arg.names, **arg.options)
        cmd.set_defaults(func=command.func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status is the command's (0 ok, 1 failed or invariant broken); no command prints help."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
