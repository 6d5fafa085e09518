"""The ``connect-bridge`` command (docs/cli.md lists the sub-commands and marks the contracts)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connect_bridge import logs
from connect_bridge.cli_bridge import (
    cmd_adopt,
    cmd_credentials_add,
    cmd_describe,
    cmd_drain,
    cmd_release,
    cmd_serve,
)
from connect_bridge.cli_common import fail
from connect_bridge.cli_drills import cmd_analyze, cmd_drill_fleet, cmd_drill_run, cmd_drill_search
from connect_bridge.codecs import connect_protocol
from connect_bridge.codecs.errors import CodecError

log = logging.getLogger("connect_bridge.cli")

DOCS_PACKAGE = "connect_bridge.docs"
"""The documentation pages ship inside the package (``docs/*.md`` as package data), so help texts
point at ``connect-bridge docs PAGE``: it works offline, for a pip user, at the installed version."""


def _docs(page: str) -> str:
    return f"connect-bridge docs {page.removesuffix('.md')}"


def doc_pages() -> dict[str, Any]:
    """The shipped pages by name (``serve`` for ``serve.md``)."""
    from importlib.resources import files

    root = files(DOCS_PACKAGE.rpartition(".")[0]).joinpath(DOCS_PACKAGE.rpartition(".")[2])
    return {p.name.removesuffix(".md"): p for p in root.iterdir() if p.name.endswith(".md")}


def _cmd_docs(args: argparse.Namespace) -> int:
    pages = doc_pages()
    if args.page is None:
        print("\n".join(sorted(pages)))
        return 0
    page = pages.get(args.page.removesuffix(".md"))
    if page is None:
        return fail(f"no documentation page {args.page!r}; pages: {', '.join(sorted(pages))}")
    sys.stdout.write(page.read_text(encoding="utf-8"))
    return 0


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


_CODEC_VERSIONS = "0 (default/eager), 1 (compatible), 2 (sessioned), or 3..32767 (a later version's header)"
"""What ``codec encode --version`` accepts: the Connect protocol's versions, and later ones that
Java reads with the newest layout it knows (the golden vectors' forward-compatibility cases)."""


def _cmd_codec(args: argparse.Namespace) -> int:
    decode, encode, from_json, to_json = _CODEC_KINDS[args.kind]
    if args.op == "decode":
        text = "".join(args.data.split())
        if len(text) % 2:
            return fail(f"invalid hex input: {len(text)} hex digits, an odd number; a byte is two digits")
        try:
            data = bytes.fromhex(text)
        except ValueError as exc:
            return fail(f"invalid hex input: {exc}")
        try:
            value = decode(data)
        except CodecError as exc:
            return fail(f"cannot decode {args.kind}: {exc}")
        print(json.dumps(to_json(value), ensure_ascii=False))
        return 0
    if args.version is None:
        return fail(f"codec encode needs --version N: {_CODEC_VERSIONS}")
    if not 0 <= args.version <= 0x7FFF:
        return fail(f"cannot encode {args.kind}: unknown 'version' {args.version}; valid: {_CODEC_VERSIONS}")
    try:
        doc = json.loads(args.data)
    except json.JSONDecodeError as exc:
        return fail(f"invalid JSON input at character {exc.pos}: {exc.msg}")
    try:
        print(encode(from_json(doc), args.version).hex())
    except CodecError as exc:
        return fail(f"cannot encode {args.kind}: {exc}")
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
    """A sub-command: ``name`` is its path (``"drill run"`` is ``run`` under :data:`_GROUPS`' drill);
    ``docs`` are its pages (``connect-bridge docs PAGE``), listed at the end of its ``--help``."""

    name: str
    help: str
    func: Callable[[argparse.Namespace], int]
    args: tuple[_Arg, ...]
    docs: tuple[str, ...]


_FLEET_OUT = "output directory (events, report, failed/, fleet.json)"
_MASTER = "Spark master URL (default: local[*])"
_FORCE = _arg(
    "--force",
    action="store_true",
    help="use a non-empty --out: this command's files there are replaced, nothing else is deleted",
)
_ADMIN_ARGS = (
    _arg(
        "--admin",
        default="127.0.0.1:9404",
        metavar="[https://]HOST:PORT",
        help="the bridge's metrics_listen, which serves the admin endpoint; https:// when the bridge "
        "sets metrics_tls (security.md below)",
    ),
    _arg(
        "--ca-file",
        metavar="PEM",
        help="with https://: CAs metrics_tls's certificate chains to (default: the system CAs)",
    ),
    _arg("--cert", metavar="PEM", help="with https://: client certificate, for metrics_tls with client_auth"),
    _arg("--key", metavar="PEM", help="private key of --cert (unencrypted)"),
    _arg(
        "--admin-token-file",
        metavar="FILE",
        help="the bridge's admin_token_file, for a change (default: $CONNECT_BRIDGE_ADMIN_TOKEN_FILE, "
        "else the file the bridge names; readable by the bridge's user only)",
    ),
)
"""``--admin`` and its TLS options, shared by ``adopt``, ``release`` and ``drain`` (the names
``describe`` uses for the worker listener's TLS)."""
_COMMANDS: tuple[_Command, ...] = (
    _Command("codec", "decode or encode Connect embedded-protocol payloads", _cmd_codec, (
        _arg("op", choices=("decode", "encode"),
             help="decode: hex bytes to JSON; encode: a JSON document to hex (required)"),
        _arg("--kind", required=True, choices=sorted(_CODEC_KINDS),
             help="subscription (a member's JoinGroup metadata) or assignment (the leader's SyncGroup "
             "assignment; required)"),
        _arg("--version", type=int, help="protocol version to encode at (encode only)"),
        _arg("data", help="hex bytes (decode) or a JSON document (encode)"),
    ), ("connect-protocol.md",)),
    _Command("serve", "run the bridge (embedded default: no upstream, state in ./state)", cmd_serve, (
        _arg("--config", metavar="FILE", help="YAML settings file; every key is optional (serve.md below)"),
        _arg("--listen", metavar="HOST:PORT",
             help="where workers connect (default: 127.0.0.1:9092, or the config file's)"),
        _arg("--upstream", metavar="HOST:PORT[,...]",
             help="the real brokers (default: none, the bridge runs embedded; upstream.md below)"),
        _arg("--state-dir", metavar="DIR",
             help="directory of the record store (default: state, or the config file's)"),
        _arg("--metrics-listen", metavar="HOST:PORT|off", help="HTTP listener for /metrics, /livez, "
             "/readyz (default: 127.0.0.1:9404, or the config file's)"),
        _arg("--config-view", metavar="FILE",
             help='watched JSON file {"offset": N, "connectors": {"name": tasks}}'),
        _arg("--check", action="store_true",
             help="validate the settings and the files they name, then exit (0 and one line, or "
             "the error a start would fail with); binds no port, creates nothing"),
    ), ("serve.md", "upstream.md")),
    _Command("describe", "describe groups through a running bridge", cmd_describe, (
        _arg("--bootstrap-server", "--bootstrap", dest="bootstrap", required=True, metavar="HOST:PORT",
             help="the bridge's listen address (--bootstrap is the same option)"),
        _arg("group", nargs="?", help="group id (default: every group)"),
        _arg("--group", dest="group_option", metavar="GROUP", help="group id, as Kafka's tools take it"),
        _arg("--command-config", metavar="FILE",
             help="Kafka client properties (security.protocol, ssl.* PEM stores, sasl.mechanism, "
             "sasl.jaas.config), as kafka-consumer-groups.sh takes them (cli.md below)"),
        _arg("--members", action="store_true",
             help="one row per worker (with --verbose: the connectors and tasks it runs)"),
        _arg("--json", action="store_true", help="machine-readable output"),
        _arg("--tls", action="store_true", help="connect over TLS (system CAs unless --ca-file)"),
        _arg("--ca-file", metavar="PEM", help="CAs the bridge's certificate chains to (implies --tls)"),
        _arg("--cert", metavar="PEM", help="client certificate, for a listener with client_auth"),
        _arg("--key", metavar="PEM", help="private key of --cert (unencrypted)"),
        _arg("--sasl-user", metavar="USER", help="log in with SASL as USER (a listener with sasl:)"),
        _arg("--sasl-mechanism", default="SCRAM-SHA-512", choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
             help="with --sasl-user: the mechanism"),
        _arg("--password-env", metavar="VAR",
             help="with --sasl-user: the password's environment variable (default: stdin's first line)"),
        _arg("--admin", metavar="[https://]HOST:PORT",
             help="also show adoption progress, from the bridge's metrics_listen (adoption.md below); "
             "https:// with metrics_tls (--ca-file, --cert, --key apply to it too)"),
    ), ("serve.md", "security.md", "adoption.md", "cli.md")),
    _Command("adopt", "take a group over from the upstream coordinator now, or show adoption progress",
             cmd_adopt, (
        _arg("group", nargs="?", help="group id (none, or --status: show every adopted/relayed group)"),
        *_ADMIN_ARGS,
        _arg("--status", action="store_true", help="show the group's phase and progress, change nothing"),
        _arg("--timeout", type=float, default=60.0, help="seconds to wait for the answer"),
    ), ("adoption.md", "operator-guide.md", "security.md")),
    _Command("release", "hand an adopted group back to the upstream coordinator (adoption's reverse)",
             cmd_release, (
        _arg("group", help="group id"),
        *_ADMIN_ARGS,
        _arg("--no-wait", action="store_true", help="return once the hand-back started"),
        _arg("--timeout", type=float, default=60.0, help="seconds to wait for the group to be released"),
    ), ("adoption.md", "operator-guide.md", "security.md")),
    _Command("drain", "hand this bridge's state partitions to the other bridges now, then stop it (ha)",
             cmd_drain, (
        *_ADMIN_ARGS,
        _arg("--timeout", type=float, default=60.0, help="seconds to wait for the bridge to drain"),
    ), ("high-availability.md", "operator-guide.md", "security.md")),
    _Command("credentials add", "add or replace a user in a SASL credentials file (terminated SASL)",
             cmd_credentials_add, (
        _arg("--file", required=True, metavar="FILE", help="the credentials file (created, mode 0600)"),
        _arg("--user", required=True, help="the user name (principal User:NAME)"),
        _arg("--mechanism", action="append", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
             help="mechanism to store a credential for; repeat for both (default: both)"),
        _arg("--iterations", type=int, default=4096, help="SCRAM iterations, 4096..16384"),
        _arg("--password-env", metavar="VAR",
             help="read the password from this environment variable (default: stdin's first line)"),
    ), ("security.md",)),
    _Command("drill run", "run one scenario file and check its invariants", cmd_drill_run, (
        _arg("scenario", help="scenario JSON file (its format: drills.md below)"),
        _arg("--out", required=True, metavar="DIR", help="output directory (events.jsonl, summary.json)"),
        _FORCE,
        _arg("--mode", choices=("sim", "live"), default="sim",
             help="simulated time, or a real bridge process and workers (live-drills.md below)"),
    ), ("drills.md", "live-drills.md")),
    _Command(
        "drill fleet",
        "run N random drills in Spark executors, then analyze them",
        cmd_drill_fleet,
        (
            *_seeds("number of drills", "fleet seed"),
            _arg("--out", required=True, metavar="DIR", help=_FLEET_OUT),
            _FORCE,
            _arg("--master", help=_MASTER),
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
            _arg(
                "--engine",
                choices=("auto", "compiled", "python"),
                default="auto",
                help="the drills' engine: compiled with mypyc (built once per source tree), "
                "interpreted, or compiled where it can be built (default: auto)",
            ),
        ),
        ("pipeline.md",),
    ),
    _Command(
        "drill search",
        "run random drills; minimize every failing one into a regression scenario",
        cmd_drill_search,
        (
            *_seeds("number of seeds to try", "first seed"),
            _arg("--adversarial", action="store_true", help="misbehaving workers (drills.md below)"),
            _arg("--protocols", metavar="P,...",
                 help="protocols to draw (default: all four, eager,compatible,sessioned,new)"),
            _arg("--budget", type=int, default=400, help="drills spent minimizing each failure"),
            _arg("--out", required=True, metavar="DIR", help="directory for the minimized scenarios"),
        ),
        ("drills.md",),
    ),
    _Command("analyze", "analyze drill event logs with PySpark", cmd_analyze, (
        _arg("paths", nargs="+", metavar="PATH", help="events.jsonl files, drill directories, fleet Parquet"),
        _arg("--out", required=True, metavar="DIR",
             help="output directory (summary.json, Parquet, charts, index.html)"),
        _FORCE,
        _arg("--master", help=_MASTER),
        _arg("--charts", type=int, default=10, metavar="N", help="drills to chart, worst first"),
    ), ("pipeline.md",)),
    _Command("docs", "print a documentation page shipped with the package (no PAGE: list them)", _cmd_docs, (
        _arg("page", nargs="?", metavar="PAGE", help="a page name, e.g. operator-guide or serve"),
    ), ("operator-guide.md",)),
)  # fmt: skip
"""Every sub-command and its flags (docs/cli.md, "The commands"), in ``--help`` order."""

_GROUPS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "drill": ("run migration drills", "drill_command", "DRILL_COMMAND", ("drills.md", "pipeline.md")),
    "credentials": (
        "manage the SASL credentials file",
        "credentials_command",
        "CREDENTIALS_COMMAND",
        ("security.md",),
    ),
}
"""Sub-commands with sub-commands of their own: help, ``dest`` and metavar of their choice, docs."""

_OVERVIEW = ("operator-guide.md", "cli.md")
"""The pages ``connect-bridge --help`` points at: the runbook, and the options every command shares."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help says its default, when it has one worth saying (not None, not a flag's
    False); help texts that state a default themselves (settings the config file may also set)
    are left alone. The epilog (the documentation links) is printed as written, and lines are not
    broken at hyphens (``--log-level`` stays one word)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False  # (0 == False: an identity test, or --seed 0 would not say its default)
            or default == argparse.SUPPRESS
            or isinstance(action, argparse._StoreConstAction)
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


VERBOSE_LAST = "verbose_last"
"""Whether ``-v``/``--verbose`` was the last logging option given: ``describe --members --verbose``
then means Kafka's verbose members view (each worker's connectors and tasks), not debug logs."""


class _LevelOption(argparse._StoreAction):
    """``--log-level``: stores the level, and that ``-v`` was not the last word on it."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        setattr(namespace, VERBOSE_LAST, False)


class _LevelConst(argparse._StoreConstAction):
    """``-q``/``-v``: store their level; ``-v`` records that it came last (:data:`VERBOSE_LAST`)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        setattr(namespace, VERBOSE_LAST, self.const == "debug")


def _add_logging_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--log-level`` / ``-q`` / ``-v``: before the sub-command (``top``) and after it, where they
    default to :data:`argparse.SUPPRESS` so a sub-command does not undo what was given before it.
    The last one given wins."""
    default = logs.DEFAULT_LEVEL if top else argparse.SUPPRESS
    where = parser.add_argument_group("logging" if top else "logging (also accepted before the command)")
    levels = tuple(logs.LEVELS)
    level_help = f"log level on stderr, one of {', '.join(levels)}"
    where.add_argument(
        "--log-level",
        action=_LevelOption,
        choices=levels,
        default=default,
        metavar="LEVEL",
        help=level_help if top else f"{level_help} (default: {logs.DEFAULT_LEVEL})",
    )
    where.add_argument(
        "-q",
        "--quiet",
        dest="log_level",
        action=_LevelConst,
        const="warning",
        default=default,
        help="warnings and errors only, and no progress bars (--log-level warning)",
    )
    where.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action=_LevelConst,
        const="debug",
        default=default,
        help="debug logs, progress steps included (--log-level debug)",
    )


def _epilog(pages: Sequence[str]) -> str:
    """The documentation pages at the end of a ``--help``, as the commands that print them."""
    return "documentation:\n" + "\n".join(f"  {_docs(page)}" for page in pages)


def package_version() -> str:
    """The installed distribution's version (what pip reports); the source tree's when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("connect-bridge")
    except PackageNotFoundError:
        from connect_bridge import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The parser of :data:`_COMMANDS`; each sub-command's ``func`` is what :func:`main` runs."""
    parser = argparse.ArgumentParser(
        prog="connect-bridge",
        description="Online migration bridge for Kafka Connect group membership (classic <-> connect).",
        epilog=_epilog(_OVERVIEW),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {package_version()}")
    _add_logging_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, Any] = {}
    for command in _COMMANDS:
        group, _, name = command.name.rpartition(" ")
        where = sub
        if group:
            if group not in groups:
                help_, dest, metavar, docs = _GROUPS[group]
                nested = sub.add_parser(
                    group, help=help_, description=help_, epilog=_epilog(docs), formatter_class=_HelpFormatter
                )
                _add_logging_options(nested, top=False)
                groups[group] = nested.add_subparsers(dest=dest, metavar=metavar, required=True)
            where = groups[group]
        cmd = where.add_parser(
            name,
            help=command.help,
            description=command.help,
            epilog=_epilog(command.docs),
            formatter_class=_HelpFormatter,
        )
        for arg in command.args:
            cmd.add_argument(*arg.names, **arg.options)
        _add_logging_options(cmd, top=False)
        cmd.set_defaults(func=command.func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status is the command's (0 ok, 1 failed or invariant broken); no command prints help."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "members", False) and getattr(args, VERBOSE_LAST, False):
        args.members_verbose = True  # Kafka's ``--describe --members --verbose``: the view, not debug logs
        args.log_level = logs.DEFAULT_LEVEL
    logs.configure_logging(args.log_level)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    given = {k: v for k, v in vars(args).items() if k != "func"}
    log.debug("connect-bridge %s (Python %s): %s", package_version(), sys.version.split()[0], given)
    return _run_guarded(args)


def _run_guarded(args: argparse.Namespace) -> int:
    """Run the command; what escapes it is a bug, shown as one line (exit 2), not a traceback.

    Everyday failures are reported by the commands themselves (exit 1); this is the safety net for
    the rest. ``--log-level debug`` prints the traceback too, for the bug report."""
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("connect-bridge: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports it
    except BrokenPipeError:
        # The reader went away (``describe --json | head``): nothing is wrong and nothing more can
        # be said. Point stdout at /dev/null so the interpreter's final flush does not fail too.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose pipe closed
    except Exception as exc:
        if getattr(args, "log_level", None) == "debug":
            import traceback

            traceback.print_exc(file=sys.stderr)
        message = " ".join(str(exc).split())
        print(
            f"connect-bridge: internal error: {type(exc).__name__}: {message} "
            "(run with --log-level debug for the traceback)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
